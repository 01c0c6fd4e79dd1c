"""A browser sandbox step's cost per task, with every task of the group loaded as a rollout worker
keeps them (issue 57: a step on tasks outside the suites cost 3.3x the default suite's).

    python -m benchmarks.bench_step_cost [--steps 30] [--rounds 3] [--outside TASK,...]

One sandbox (the rollout worker's: deferred blob writes) on one headless Chromium. For each group
(the default suite, MiniWoB++ tasks in no suite, the games) it first loads every task of the group
(a reset each, as a worker cycling through them does), then plays rounds: on each task in turn
``--steps`` random clicks (a game: random clicks and arrow keys), a reset whenever an episode
ends. It prints each task's median step (``BrowserSandbox.step``: action, clock, reward read,
screenshot, PNG decode) and each group's median against the default suite's. Resets are timed
apart (a new episode's page is not a step).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
import time
from pathlib import Path

from app.provenance import add_allow_dirty, commit_to_run
from producers.sandboxes.browser import BrowserSandbox
from producers.sandboxes.browser_host import BrowserHost
from producers.suites import SUITES
from schemas.actions import Click, Hotkey
from schemas.blobs import BlobStore
from schemas.events import TaskSpec

# one to three clicks, in no suite (issue 56's kind of task)
OUTSIDE = ("click-shades", "click-shape", "click-pie", "count-shape", "click-menu", "grid-coordinate",
           "click-scroll-list", "simple-algebra")
ARROWS = ("ArrowUp", "ArrowDown", "ArrowLeft", "ArrowRight")


def spec(name: str, seed: int) -> TaskSpec:
    suite = "games" if name.startswith("games.") else "miniwob"
    return TaskSpec(task_id=f"bench.{name}.{seed}", suite=suite, name=name, seed=seed, max_steps=1000)


def action(name: str, rng: random.Random):
    if name.startswith("games.") and rng.random() < 0.5:
        return Hotkey(key=rng.choice(ARROWS))
    return Click(x=rng.random(), y=rng.random())


async def play(sb: BrowserSandbox, name: str, steps: int, rng: random.Random) -> list[float]:
    """-> the wall-clock of each of ``steps`` steps on ``name`` (resets not counted)."""
    await sb.reset(spec(name, rng.randrange(10**6)))
    took = []
    for _ in range(steps):
        t0 = time.perf_counter()
        _, result = await asyncio.gather(sb.flush(), sb.step(action(name, rng)))
        took.append(time.perf_counter() - t0)
        if result.done:
            await sb.reset(spec(name, rng.randrange(10**6)))
    await sb.flush()
    return took


async def group_cost(host: BrowserHost, tasks: tuple[str, ...], steps: int, rounds: int) -> dict[str, float]:
    """Median step seconds per task, every task of the group loaded in one sandbox."""
    sb = BrowserSandbox(BlobStore(tempfile.mkdtemp(prefix="bench-blobs-")), host=host, defer_writes=True)
    await sb.start()
    rng = random.Random(0)
    try:
        for name in tasks:  # load them all, as a worker cycling through the group keeps them
            await sb.reset(spec(name, 0))
        samples: dict[str, list[float]] = {name: [] for name in tasks}
        for _ in range(rounds):
            for name in tasks:
                samples[name] += await play(sb, name, steps, rng)
        return {name: statistics.median(s) for name, s in samples.items()}
    finally:
        await sb.close()


async def main(args) -> None:
    groups = {"default suite": SUITES["default"].tasks, "outside the suites": tuple(args.outside.split(",")),
              "games": SUITES["games"].tasks}
    host = BrowserHost()
    try:
        costs = {g: await group_cost(host, tasks, args.steps, args.rounds) for g, tasks in groups.items()}
    finally:
        await host.close()
    base = statistics.median(costs["default suite"].values())
    print("| group | task | step p50 (ms) | / default suite's |\n|---|---|---|---|")
    for g, per_task in costs.items():
        for name, s in per_task.items():
            print(f"| {g} | {name} | {s * 1000:.0f} | {s / base:.2f} |")
        median = statistics.median(per_task.values())
        print(f"| {g} | **median** | **{median * 1000:.0f}** | **{median / base:.2f}** |")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=30, help="steps on a task per round")
    ap.add_argument("--rounds", type=int, default=3, help="rounds over the group's tasks")
    ap.add_argument("--outside", default=",".join(OUTSIDE), help="MiniWoB++ tasks in no suite")
    add_allow_dirty(ap)
    args = ap.parse_args()
    state = commit_to_run(Path(__file__).resolve().parents[1], args.allow_dirty)
    print(f"commit {state['commit']}{' (uncommitted changes: ' + ', '.join(state['dirty']) + ')' if state['dirty'] else ''}")
    asyncio.run(main(args))
