"""Browser sandbox steps/s vs a bare Playwright loop, memory per sandbox, steps/s with N sandboxes.

    python -m benchmarks.bench_rollout [--steps 200] [--rounds 4] [--sandboxes 1,2,4] [--policy none|pixel]

All in one run, on one headless Chromium:
1. bare, two ways, in a loop on the sandbox's own page: the same browser calls as a sandbox step
   (``mouse.click``, one evaluate advancing the page's fake clock by the step's 100 ms and reading
   the reward, a PNG screenshot of the viewport on the page's CDP session), and the least a step
   can be (``mouse.click`` + that screenshot);
2. sandbox: ``BrowserSandbox.step(Click)`` on that same page (click, fake-clock advance, reward
   read, screenshot, PNG decode, durable blob store write overlapped with the next action choice and
   step, as in the rollout worker); ratio sandbox/bare. Random clicks end an episode now and then; the
   reset that starts the next one loads a new task page, which is not a step and which the bare
   loop never does, so the ratio times steps only (the rate with resets counted is printed too);
3. memory: RSS and USS of the renderer processes (one per sandbox page) with 4 pages open;
4. N = 1, 2, 4 sandboxes stepping concurrently (random clicks on click-test-2, reset when done),
   optionally with the in-process pixel policy choosing every action (``--policy pixel``, batched
   like the rollout worker's torch client), total environment steps/s.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import tempfile
import time

import psutil

from producers.sandboxes.browser import BrowserSandbox
from producers.sandboxes.pages import MiniwobPages
from producers.sandboxes.browser_host import BrowserHost
from schemas.actions import Click
from schemas.blobs import BlobStore
from schemas.events import TaskSpec

STEP_MS = 100  # BrowserSandbox's default step_ms
TASK = "click-test-2"  # two buttons: random clicks end an episode now and then, as in training


def task(seed: int) -> TaskSpec:
    return TaskSpec(task_id=f"bench.{seed}", suite="miniwob", name=TASK, seed=seed, max_steps=1000)


async def bare_loop(page, cdp, steps: int, rng: random.Random, clock: bool = False) -> float:
    """Bare Playwright steps/s: click + screenshot (``cdp``: the page's CDP session); with
    ``clock``, the same browser calls as a sandbox step: click, advance the fake clock and read
    the reward in one evaluate, screenshot."""
    step_js = f"(async () => {{ await globalThis.__pwClock.controller.runFor({STEP_MS}); return {MiniwobPages.state_js}; }})()"
    t0 = time.perf_counter()
    for _ in range(steps):
        await page.mouse.click(rng.randrange(160), rng.randrange(50, 210))
        if clock:
            await page.evaluate(step_js)
        await cdp.send("Page.captureScreenshot", {"format": "png", "optimizeForSpeed": True})
    return steps / (time.perf_counter() - t0)


async def sandbox_loop(sb: BrowserSandbox, steps: int, rng: random.Random, seed: int, client=None) -> tuple[int, float]:
    """-> (steps, seconds spent in resets after the first: a new episode's page, not a step)."""
    obs, resets_s = await sb.reset(task(seed)), 0.0
    for i in range(steps):
        if client is None:
            action = Click(x=rng.random(), y=0.25 + 0.75 * rng.random())
        else:
            from producers.policy_client import PolicyRequest

            action = (await client.act(PolicyRequest(task=task(seed), obs=obs, step_index=i))).decision.action
        # as the rollout worker does: the previous step's screenshots are stored (before it is
        # published) while this step acts
        _, result = await asyncio.gather(sb.flush(), sb.step(action))
        obs = result.obs
        if result.done:
            t0 = time.perf_counter()
            obs = await sb.reset(task(seed + i + 1))
            resets_s += time.perf_counter() - t0
    await sb.flush()
    return steps, resets_s


def renderer_memory(host: BrowserHost) -> tuple[float, float, int]:
    rss = uss = 0
    pids = host.renderer_pids()
    for pid in pids:
        try:
            info = psutil.Process(pid).memory_full_info()
        except psutil.Error:  # a renderer that just exited
            continue
        rss, uss = rss + info.rss, uss + info.uss
    return rss / 2**20, uss / 2**20, len(pids)


async def main(args) -> None:
    host = BrowserHost()
    blobs = BlobStore(tempfile.mkdtemp(prefix="bench-blobs-"))
    rng = random.Random(0)
    boxes = [BrowserSandbox(blobs, host=host, defer_writes=True) for _ in range(max(args.sandboxes))]
    for sb in boxes:
        await sb.start()
    one = boxes[0]
    await one.reset(task(0))
    await bare_loop(one._page, one._cdp, 20, rng)  # warm-up
    # Rounds alternate the loops, so a slow spell of the machine falls on all of them alike.
    bare_s = same_s = took = resets_s = 0.0
    for r in range(args.rounds):
        bare_s += args.steps / await bare_loop(one._page, one._cdp, args.steps, rng)
        same_s += args.steps / await bare_loop(one._page, one._cdp, args.steps, rng, clock=True)
        t0 = time.perf_counter()
        resets_s += (await sandbox_loop(one, args.steps, rng, 1000 * r))[1]
        took += time.perf_counter() - t0
    n = args.steps * args.rounds
    bare, same, env, with_resets = n / bare_s, n / same_s, n / (took - resets_s), n / took
    print(f"one page: bare Playwright click+clock+reward+screenshot {same:7.1f} steps/s | sandbox.step {env:7.1f} "
          f"steps/s | sandbox/bare {env / same:.2f} ({args.rounds} alternating rounds of {args.steps} steps)")
    print(f"one page: bare Playwright click+screenshot {bare:7.1f} steps/s | sandbox.step {env:7.1f} steps/s"
          f" | sandbox/bare {env / bare:.2f} (counting the resets between episodes too: {with_resets:.1f} "
          f"steps/s, {with_resets / bare:.2f}; resets took {resets_s:.2f}s of {took:.2f}s)")

    for sb in boxes[1:4]:
        await sb.reset(task(1))
    rss, uss, n = renderer_memory(host)
    pages = min(4, len(boxes))
    print(f"memory: {n} renderer processes for {pages} sandbox pages: USS {uss:.0f} MiB in all = "
          f"{uss / pages:.0f} MiB per sandbox (RSS {rss:.0f} MiB, {rss / max(n, 1):.0f} MiB per renderer, "
          f"shared pages counted in each)")
    try:
        browser_rss = psutil.Process(host.pid).memory_info().rss / 2**20
        print(f"memory: browser process RSS {browser_rss:.0f} MiB (shared by all pages)")
    except (psutil.NoSuchProcess, TypeError):
        pass

    client = None
    if args.policy == "pixel":
        from producers.policy_client import TorchClient

        client = TorchClient("bench", kind="pixel", config={"action_types": ["click"]})
    for n in args.sandboxes:
        t0 = time.perf_counter()
        done = await asyncio.gather(*(sandbox_loop(sb, args.steps, random.Random(i), 100 * i, client)
                                      for i, sb in enumerate(boxes[:n])))
        rate = sum(n_steps for n_steps, _ in done) / (time.perf_counter() - t0)  # resets counted: a workload
        print(f"N={n}: {rate:7.1f} env steps/s in total ({rate / n:6.1f} per sandbox)"
              + (" with the pixel policy acting" if client else ""))
    for sb in boxes:
        await sb.close()
    await host.close()


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=200, help="steps per loop (per sandbox for N > 1)")
    p.add_argument("--rounds", type=int, default=4, help="alternating bare/sandbox rounds for the one-page ratio")
    p.add_argument("--sandboxes", default="1,2,4", help="comma-separated sandbox counts")
    p.add_argument("--policy", default="none", choices=("none", "pixel"), help="who picks the actions")
    a = p.parse_args()
    a.sandboxes = [int(x) for x in a.sandboxes.split(",")]
    asyncio.run(main(a))
