"""The bare loop of the throughput benchmarks (producers.bare_loop, python -m benchmarks.bench_main_loop) can play the main
job's episode lengths: a new task page when the task ends and after every ``episode_steps``."""

from __future__ import annotations

import asyncio
import random
from types import SimpleNamespace

from producers.bare_loop import bare_sandbox, load_pages


class CountingSandbox:
    """Ends its task on every ``done_every``-th step of an episode (0: never)."""

    def __init__(self, done_every: int = 0) -> None:
        self.done_every, self.resets, self.steps, self.in_episode = done_every, [], 0, 0

    async def reset(self, task):
        self.resets.append(task)
        self.in_episode = 0

    async def step(self, action):
        self.steps += 1
        self.in_episode += 1
        return SimpleNamespace(done=bool(self.done_every) and self.in_episode % self.done_every == 0)

    async def flush(self):
        return None


def play(sb: CountingSandbox, steps: int, episode_steps: int = 0) -> tuple[int, int]:
    return asyncio.run(bare_sandbox(sb, ["a", "b", "c"], steps, random.Random(0), episode_steps))


def test_random_clicks_start_a_new_page_only_when_the_task_ends():
    sb = CountingSandbox(done_every=4)
    assert play(sb, 12) == (12, 3) and sb.steps == 12 and len(sb.resets) == 3  # no page after the last step


def test_the_main_jobs_episode_length_resets_the_page_every_l_steps():
    sb = CountingSandbox(done_every=0)
    assert play(sb, 9, episode_steps=3) == (9, 3) and len(sb.resets) == 3
    assert play(CountingSandbox(done_every=2), 9, episode_steps=3) == (9, 5)  # the task's end comes first
    tasks = CountingSandbox()
    play(tasks, 6, episode_steps=2)
    assert len(set(tasks.resets)) == 3  # each new page is the next task


def test_every_task_page_is_loaded_once_before_the_timed_loop():
    sb = CountingSandbox()
    tasks = [SimpleNamespace(name=n, seed=k) for k, n in enumerate(["a", "b", "a", "c", "b"])]
    assert asyncio.run(load_pages(sb, tasks)) == 3
    assert [(t.name, t.seed) for t in sb.resets] == [("a", 0), ("b", 1), ("c", 3)]  # each name once, its first task
