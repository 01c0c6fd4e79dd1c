"""The starter suite's tasks (no scripted solver: learnt from reward alone) load in the real
browser sandbox, state an instruction, and end with a MiniWoB reward under random clicks, the
way the demo's policy from random weights first meets them."""

from __future__ import annotations

import random

import pytest

from tests.e2e.browser_support import browser_sandbox

from producers.suites import get_suite
from schemas.actions import Click
from schemas.events import TaskSpec

pytestmark = pytest.mark.e2e

CLICKS = 60  # random clicks at most per task: on these seeds the page ends each episode within 30
BAR = 50 / 210  # the instruction bar: clicks go to the task area under it, where the pixel policy's land


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    yield from browser_sandbox(tmp_path_factory)


def test_every_starter_task_loads_and_ends_with_a_reward(env):
    loop, sandbox = env
    suite = get_suite("starter")
    ends = {}
    for name in suite.tasks:
        rng = random.Random(name)
        obs = loop.run(sandbox.reset(TaskSpec(task_id=f"{name}-0", suite="miniwob", name=name, seed=0, max_steps=CLICKS)))
        assert obs.observation.instruction.strip(), name
        for _ in range(CLICKS):
            result = loop.run(sandbox.step(Click(x=rng.random(), y=BAR + (1 - BAR) * rng.random())))
            if result.done:
                break
        assert result.done and result.error is None, (name, result.error)
        assert -1.0 <= result.reward <= 1.0 and result.success == (result.reward > 0), (name, result.reward)
        ends[name] = result.success
    assert any(ends.values()) and not all(ends.values()), ends  # both ends are reachable by chance
