"""The bare loop: random clicks on a sandbox with nothing around it (no policy, no Kafka), the
machine's bare capacity that the rollout worker's steps/s is measured against
(``python -m benchmarks.bench_main_loop``, ``benchmarks.bench_main_job``)."""

from __future__ import annotations

import asyncio
import random

from producers.sandboxes.browser import BrowserSandbox
from schemas.actions import Click


async def bare_sandbox(sb: BrowserSandbox, tasks: list, steps: int, rng: random.Random,
                       episode_steps: int = 0) -> tuple[int, int]:
    """``steps`` random clicks, a new task page after each ended episode, and after every
    ``episode_steps`` steps of one (0: only when the task ends): the main job's policy ends its
    episodes sooner than random clicks do, and a page reset costs the browser more than a click.
    Returns the steps and the episodes started."""
    k, episodes, in_episode = rng.randrange(len(tasks)), 1, 0
    await sb.reset(tasks[k])
    for i in range(steps):
        _, result = await asyncio.gather(sb.flush(), sb.step(Click(x=rng.random(), y=0.25 + 0.75 * rng.random())))
        in_episode += 1
        if (result.done or in_episode == episode_steps) and i < steps - 1:
            k, episodes, in_episode = k + 1, episodes + 1, 0
            await sb.reset(tasks[k % len(tasks)])
    await sb.flush()
    return steps, episodes


async def load_pages(sb: BrowserSandbox, tasks: list) -> int:
    """One reset on each of ``tasks``' task pages (the first task of each name), so a timed loop
    after it finds them loaded, as a main job's sandbox has them after its first minutes: a
    page's first load costs far more than a reset in it, and the main job pays it once per task.
    Returns the pages reset."""
    first: dict = {}
    for task in tasks:
        first.setdefault(task.name, task)
    for task in first.values():
        await sb.reset(task)
    return len(first)

