"""Dynamic batching: concurrent requests wait up to ``max_wait_ms`` (or until ``max_batch``
arrive) and run as one forward pass.

Requests only share a call when their ``key`` matches (e.g. greedy vs sampled, or a different
``max_tokens``); a collected batch is split by key and each group runs once, in arrival order.
The calls run on one worker thread, so the model never sees two forwards at once and the event
loop keeps accepting requests meanwhile. ``max_batch=1`` turns batching off (for comparisons).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from dataclasses import dataclass
from typing import Callable, Generic, Hashable, TypeVar

T = TypeVar("T")
R = TypeVar("R")


@dataclass
class BatchStats:
    batches: int = 0
    items: int = 0
    largest: int = 0

    @property
    def mean_batch(self) -> float:
        return self.items / self.batches if self.batches else 0.0


def group_by_key(items: list[T], key: Callable[[T], Hashable]) -> list[list[int]]:
    """Indices of ``items`` grouped by key, groups in order of first arrival."""
    groups: dict[Hashable, list[int]] = {}
    for i, item in enumerate(items):
        groups.setdefault(key(item), []).append(i)
    return list(groups.values())


class DynamicBatcher(Generic[T, R]):
    def __init__(self, run_batch: Callable[[list[T]], list[R]], *, max_batch: int = 8, max_wait_ms: float = 5.0,
                 key: Callable[[T], Hashable] = lambda item: None,
                 executor: concurrent.futures.Executor | None = None) -> None:
        if max_batch < 1 or max_wait_ms < 0:
            raise ValueError("max_batch must be >= 1 and max_wait_ms >= 0")
        self.run_batch, self.max_batch, self.max_wait = run_batch, max_batch, max_wait_ms / 1000.0
        self.key = key
        self.executor = executor or concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="batch")
        self.stats = BatchStats()
        self._queue: asyncio.Queue[tuple[T, asyncio.Future]] | None = None
        self._worker: asyncio.Task | None = None

    async def start(self) -> None:
        self._queue = asyncio.Queue()
        self._worker = asyncio.create_task(self._loop(), name="dynamic-batcher")

    async def close(self) -> None:
        if self._worker is not None:
            self._worker.cancel()
            try:
                await self._worker
            except asyncio.CancelledError:
                pass
            self._worker = None

    async def submit(self, item: T) -> R:
        if self._queue is None:
            raise RuntimeError("DynamicBatcher.start() was not awaited")
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        await self._queue.put((item, fut))
        return await fut

    async def _collect(self) -> list[tuple[T, asyncio.Future]]:
        assert self._queue is not None
        batch = [await self._queue.get()]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.max_wait
        while len(batch) < self.max_batch:
            try:  # take whatever is already queued without waiting
                batch.append(self._queue.get_nowait())
                continue
            except asyncio.QueueEmpty:
                pass
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            try:
                batch.append(await asyncio.wait_for(self._queue.get(), remaining))
            except asyncio.TimeoutError:
                break
        return batch

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = await self._collect()
            items = [item for item, _ in batch]
            for idx in group_by_key(items, self.key):
                group = [items[i] for i in idx]
                try:
                    results = await loop.run_in_executor(self.executor, self.run_batch, group)
                    if len(results) != len(group):
                        raise RuntimeError(f"batch function returned {len(results)} results for {len(group)} items")
                except Exception as exc:  # one bad batch fails its own requests, not the server
                    for i in idx:
                        if not batch[i][1].done():
                            batch[i][1].set_exception(exc)
                    continue
                self.stats.batches += 1
                self.stats.items += len(group)
                self.stats.largest = max(self.stats.largest, len(group))
                for i, result in zip(idx, results):
                    if not batch[i][1].done():  # the client may have gone away
                        batch[i][1].set_result(result)

