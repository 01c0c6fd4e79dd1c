"""The starter suite's floor: success of the random policy on each task, played in the real
browser sandbox (headless Chromium, fake clock), as `flywheel demo` plays it from random weights.

    python -m benchmarks.starter_reference [--episodes 50] [--tasks starter] [--seed 100000]
                                           [--sandboxes 2] [--max-steps 0]

The random policy clicks a uniform point of the 160 x 160 task area under the instruction bar
(where the pixel policy's clicks land: its crop) at every step, until the page ends the episode
or the step budget (``--max-steps``; 0: the suite's) runs out. Episode k of a task runs from seed
``seed + k``, its clicks drawn from a generator seeded by the same seed, so a rerun prints the
same numbers. Printed per task: success rate +- its standard error, the share of episodes the
page ended (the rest ran out of steps), mean steps, and mean reward of the ended ones. These are
the random-policy figures docs/tasks.md states for the starter suite.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import random
import tempfile
import time

from producers.sandboxes.browser import BrowserSandbox
from producers.sandboxes.browser_host import BrowserHost
from producers.suites import plan
from schemas.actions import Click
from schemas.blobs import BlobStore
from schemas.events import TaskSpec

BAR = 50 / 210  # MiniWoB's instruction bar: the top 50 of the 210 px the sandbox's coordinates span


def random_click(rng: random.Random) -> Click:
    """A uniform click in the task area under the instruction bar (coordinates of the whole #wrap)."""
    return Click(x=rng.random(), y=BAR + (1 - BAR) * rng.random())


async def play(sandbox: BrowserSandbox, task: str, seed: int, max_steps: int) -> tuple[bool, bool, int, float]:
    """One episode: (success, ended by the page, steps, reward)."""
    rng = random.Random(seed)
    await sandbox.reset(TaskSpec(task_id=f"ref.{task}.{seed}", suite="miniwob", name=task, seed=seed,
                                 max_steps=max_steps))
    for steps in range(1, max_steps + 1):
        result = await sandbox.step(random_click(rng))
        if result.done:
            return result.success, True, steps, result.reward
    return False, False, max_steps, 0.0


async def measure(task: str, seeds: list[int], max_steps: int, sandboxes: list[BrowserSandbox]) -> list[tuple]:
    """Every seed's episode, the seeds dealt round-robin to the sandboxes; -> results in seed order."""
    n = len(sandboxes)

    async def deal(i: int) -> list[tuple]:
        return [await play(sandboxes[i], task, seed, max_steps) for seed in seeds[i::n]]

    dealt = await asyncio.gather(*(deal(i) for i in range(n)))
    return [dealt[k % n][k // n] for k in range(len(seeds))]


def rate_se(hits: int, n: int) -> tuple[float, float]:
    """A proportion and its standard error."""
    p = hits / n
    return p, math.sqrt(p * (1 - p) / n)


@contextlib.asynccontextmanager
async def browser_sandboxes(n: int):
    """``n`` started sandboxes sharing one Chromium; closed, with it, on the way out."""
    host = BrowserHost()
    blobs = BlobStore(tempfile.mkdtemp(prefix="starter-ref-"))
    sandboxes = [BrowserSandbox(blobs, host=host) for _ in range(n)]
    try:
        await asyncio.gather(*(s.start() for s in sandboxes))
        yield sandboxes
    finally:
        await asyncio.gather(*(s.close() for s in sandboxes), return_exceptions=True)
        await host.close()


async def main(tasks: list[str], episodes: int, seed: int, n_sandboxes: int, max_steps: int) -> None:
    seeds = [seed + k for k in range(episodes)]
    print(f"random clicks, step budget {max_steps}, {episodes} episodes per task (seeds {seed}..{seed + episodes - 1})")
    print(f"{'task':<22} {'success':>16} {'ended':>6} {'steps':>6} {'reward(ended)':>14} {'s/episode':>9}")
    async with browser_sandboxes(n_sandboxes) as sandboxes:
        for task in tasks:
            t0 = time.perf_counter()
            results = await measure(task, seeds, max_steps, sandboxes)
            rate, se = rate_se(sum(r[0] for r in results), len(results))
            ended = [r for r in results if r[1]]
            reward = sum(r[3] for r in ended) / len(ended) if ended else float("nan")
            steps = sum(r[2] for r in results) / len(results)
            wall = (time.perf_counter() - t0) / len(results)
            print(f"{task:<22} {rate:>8.3f} +- {se:.3f} {len(ended) / len(results):>6.2f} {steps:>6.2f} {reward:>14.3f} "
                  f"{wall:>9.2f}", flush=True)


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default="starter", help="comma-separated suites or MiniWoB++ task names")
    parser.add_argument("--episodes", type=int, default=50, help="episodes per task")
    parser.add_argument("--max-steps", type=int, default=0, help="step budget per episode (0: the suite's)")
    parser.add_argument("--seed", type=int, default=100_000, help="the first episode's seed")
    parser.add_argument("--sandboxes", type=int, default=2, help="sandboxes playing at once (one Chromium)")
    args = parser.parse_args()
    if args.episodes < 1 or args.sandboxes < 1 or args.max_steps < 0:
        parser.error("--episodes and --sandboxes must be >= 1, --max-steps >= 0")
    return args


if __name__ == "__main__":
    args = arguments()
    run = plan([n for n in args.tasks.split(",") if n], args.max_steps)
    asyncio.run(main(list(run.tasks), args.episodes, args.seed, args.sandboxes, run.max_steps))
