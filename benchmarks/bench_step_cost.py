"""A browser sandbox step's cost per task, with every task of the group loaded as a rollout worker
keeps them (issue 57: a step on tasks outside the suites cost 3.3x the default suite's).

    python -m benchmarks.bench_step_cost [--steps 30] [--rounds 3] [--sandboxes 1] [--outside TASK,...]

``--sandboxes`` sandboxes (the rollout worker's: deferred blob writes) on one headless Chromium,
stepping at once as the main job's do (it runs 4 on this machine). For each group (the default
suite, MiniWoB++ tasks in no suite, the games) each sandbox first loads every task of the group
(a reset each, as a worker cycling through them does), then plays rounds: on each task in turn
``--steps`` steps of the main job's kinds of action, drawn at random (a MiniWoB++ task: clicks,
typing, scrolls and Enter, the default suite's action heads; a game: clicks and arrow keys), a
reset whenever an episode ends. A step is ``BrowserSandbox.step`` whole: the action's input
events, the fake clock, the reward read, the screenshot and its decode, the blob write overlapped
with the next step as in the worker. It prints each task's median and p90 step, each group's
median against the default suite's, and each group's CPU per step by process (core-ms: Chromium,
the Playwright driver, this Python), which contention changes less than the wall-clock. Resets
are timed apart (a new episode's page is not a step).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import tempfile
import time
from pathlib import Path

import psutil

from app.provenance import add_allow_dirty, commit_to_run
from producers.sandboxes.browser import BrowserSandbox
from producers.sandboxes.browser_host import BrowserHost
from producers.suites import SUITES
from schemas.actions import Click, Hotkey, PressEnter, Scroll, Type
from schemas.blobs import BlobStore
from schemas.events import TaskSpec

# one to three clicks, in no suite (issue 56's kind of task)
OUTSIDE = ("click-shades", "click-shape", "click-pie", "count-shape", "click-menu", "grid-coordinate",
           "click-scroll-list", "simple-algebra")
ARROWS = ("ArrowUp", "ArrowDown", "ArrowLeft", "ArrowRight")
WORDS = ("hello", "Flywheel", "abc", "42")


def spec(name: str, seed: int) -> TaskSpec:
    suite = "games" if name.startswith("games.") else "miniwob"
    return TaskSpec(task_id=f"bench.{name}.{seed}", suite=suite, name=name, seed=seed, max_steps=1000)


def action(name: str, rng: random.Random):
    """One of the main job's actions on ``name``: a game's clicks and arrows; on MiniWoB++ the
    default suite's heads (click, type, scroll, Enter), clicks most often."""
    r = rng.random()
    if name.startswith("games."):
        return Hotkey(key=rng.choice(ARROWS)) if r < 0.5 else Click(x=rng.random(), y=rng.random())
    if r < 0.55:
        return Click(x=rng.random(), y=rng.random())
    if r < 0.7:
        return Type(content=rng.choice(WORDS))
    if r < 0.85:
        return Scroll(x=rng.random(), y=rng.random(), direction=rng.choice(("up", "down")))
    return PressEnter()


def cpu_seconds() -> dict[str, float]:
    """CPU seconds so far of this process and its children, by kind (chromium, driver, python)."""
    me, out = psutil.Process(), {}
    for proc in [me, *me.children(recursive=True)]:
        try:
            times, exe = proc.cpu_times(), os.path.basename(proc.cmdline()[0])
        except (psutil.Error, IndexError):
            continue
        kind = "python" if proc.pid == me.pid else "chromium" if "chrom" in exe else "driver"
        out[kind] = out.get(kind, 0.0) + times.user + times.system
    return out


def p90(values: list[float]) -> float:
    return statistics.quantiles(values, n=10)[-1] if len(values) > 1 else values[0]


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


async def load(sb: BrowserSandbox, tasks: tuple[str, ...]) -> None:
    """Every task's page loaded, as a worker cycling through the group keeps them."""
    await sb.start()
    for name in tasks:
        await sb.reset(spec(name, 0))


async def sandbox_rounds(sb: BrowserSandbox, tasks: tuple[str, ...], steps: int, rounds: int, rng: random.Random,
                         samples: dict[str, list[float]]) -> None:
    for _ in range(rounds):
        for name in tasks:
            samples[name] += await play(sb, name, steps, rng)


async def group_cost(host: BrowserHost, tasks: tuple[str, ...], steps: int, rounds: int,
                     sandboxes: int) -> tuple[dict[str, list[float]], dict[str, float]]:
    """-> (step seconds per task, CPU core-ms per step by kind, the resets of episodes that ended
    counted in), ``sandboxes`` sandboxes at once, each starting the group at another task."""
    sbs = [BrowserSandbox(BlobStore(tempfile.mkdtemp(prefix="bench-blobs-")), host=host, defer_writes=True)
           for _ in range(sandboxes)]
    samples: dict[str, list[float]] = {name: [] for name in tasks}
    try:
        for sb in sbs:
            await load(sb, tasks)
        before = cpu_seconds()
        await asyncio.gather(*(sandbox_rounds(sb, tasks[i % len(tasks):] + tasks[:i % len(tasks)], steps, rounds,
                                              random.Random(i), samples) for i, sb in enumerate(sbs)))
        after, n = cpu_seconds(), sum(len(s) for s in samples.values())
        return samples, {k: (after[k] - before.get(k, 0.0)) * 1000 / n for k in sorted(after)}
    finally:
        for sb in sbs:
            await sb.close()


async def main(args) -> None:
    groups = {"default suite": SUITES["default"].tasks, "outside the suites": tuple(args.outside.split(",")),
              "games": SUITES["games"].tasks}
    host = BrowserHost()
    try:
        costs = {g: await group_cost(host, tasks, args.steps, args.rounds, args.sandboxes) for g, tasks in groups.items()}
    finally:
        await host.close()
    print(f"{args.sandboxes} sandbox(es) stepping at once on one Chromium")
    base = statistics.median(statistics.median(s) for s in costs["default suite"][0].values())
    print("| group | task | step p50 (ms) | step p90 (ms) | p50 / default suite's |\n|---|---|---|---|---|")
    for g, (per_task, _) in costs.items():
        for name, s in per_task.items():
            print(f"| {g} | {name} | {statistics.median(s) * 1000:.0f} | {p90(s) * 1000:.0f} "
                  f"| {statistics.median(s) / base:.2f} |")
        median = statistics.median(statistics.median(s) for s in per_task.values())
        every = [x for s in per_task.values() for x in s]
        print(f"| {g} | **median** | **{median * 1000:.0f}** | **{p90(every) * 1000:.0f}** | **{median / base:.2f}** |")
    print("\n| group | CPU per step (core-ms) |\n|---|---|")
    for g, (_, cpu) in costs.items():
        print(f"| {g} | {sum(cpu.values()):.0f}: " + ", ".join(f"{k} {v:.1f}" for k, v in cpu.items()) + " |")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=30, help="steps on a task per round")
    ap.add_argument("--rounds", type=int, default=3, help="rounds over the group's tasks")
    ap.add_argument("--sandboxes", type=int, default=1, help="sandboxes stepping at once (the main job runs 4)")
    ap.add_argument("--outside", default=",".join(OUTSIDE), help="MiniWoB++ tasks in no suite")
    add_allow_dirty(ap)
    args = ap.parse_args()
    state = commit_to_run(Path(__file__).resolve().parents[1], args.allow_dirty)
    print(f"commit {state['commit']}{' (uncommitted changes: ' + ', '.join(state['dirty']) + ')' if state['dirty'] else ''}")
    asyncio.run(main(args))
