"""Dynamic batching: concurrent requests share one call, grouped by key; errors stay per batch."""

from __future__ import annotations

import asyncio
import threading

import pytest

from trainer.serving.batching import DynamicBatcher, group_by_key


def test_group_by_key_keeps_arrival_order():
    assert group_by_key(["a1", "b1", "a2", "c1", "b2"], key=lambda s: s[0]) == [[0, 2], [1, 4], [3]]


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 20))


def test_concurrent_requests_share_one_call():
    calls: list[list[int]] = []

    def double(items: list[int]) -> list[int]:
        calls.append(list(items))
        return [2 * x for x in items]

    async def main():
        b = DynamicBatcher(double, max_batch=8, max_wait_ms=50)
        await b.start()
        results = await asyncio.gather(*(b.submit(i) for i in range(5)))
        await b.close()
        return results, b.stats

    results, stats = run(main())
    assert results == [0, 2, 4, 6, 8]
    assert calls == [[0, 1, 2, 3, 4]] and stats.batches == 1 and stats.mean_batch == 5


def test_max_batch_bounds_a_call_and_one_disables_batching():
    sizes: list[int] = []

    def ident(items):
        sizes.append(len(items))
        return items

    async def main(max_batch):
        b = DynamicBatcher(ident, max_batch=max_batch, max_wait_ms=20)
        await b.start()
        out = await asyncio.gather(*(b.submit(i) for i in range(7)))
        await b.close()
        return out

    assert run(main(3)) == list(range(7)) and max(sizes) == 3 and sum(sizes) == 7
    sizes.clear()
    assert run(main(1)) == list(range(7)) and sizes == [1] * 7


def test_items_with_different_keys_never_share_a_call():
    seen: list[set[bool]] = []

    def run_batch(items):
        seen.append({greedy for _, greedy in items})
        return [x for x, _ in items]

    async def main():
        b = DynamicBatcher(run_batch, max_batch=8, max_wait_ms=30, key=lambda it: it[1])
        await b.start()
        out = await asyncio.gather(*(b.submit((i, i % 2 == 0)) for i in range(6)))
        await b.close()
        return out

    assert run(main()) == list(range(6))
    assert all(len(s) == 1 for s in seen) and len(seen) == 2


def test_a_failing_batch_fails_its_requests_and_the_batcher_goes_on():
    def maybe_fail(items):
        if any(x < 0 for x in items):
            raise ValueError("negative")
        return items

    async def main():
        b = DynamicBatcher(maybe_fail, max_batch=4, max_wait_ms=0)
        await b.start()
        with pytest.raises(ValueError, match="negative"):
            await b.submit(-1)
        ok = await b.submit(3)
        await b.close()
        return ok

    assert run(main()) == 3


def test_calls_run_off_the_event_loop_thread():
    threads: list[str] = []

    def record(items):
        threads.append(threading.current_thread().name)
        return items

    async def main():
        b = DynamicBatcher(record, max_batch=2, max_wait_ms=1)
        await b.start()
        await b.submit(1)
        await b.close()

    run(main())
    assert threads and threads[0] != threading.main_thread().name
