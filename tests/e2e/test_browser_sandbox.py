"""The browser sandbox on every MiniWoB++ task the miniwob package ships (one shared Chromium)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.e2e.browser_support import LoopThread, require_chromium

from producers import scripted
from producers.sandboxes.miniwob_server import TASK_HEIGHT, TASK_WIDTH, task_names
from schemas.actions import Click
from schemas.blobs import BlobStore
from schemas.events import TaskSpec

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    require_chromium()
    from producers.sandboxes.browser import BrowserSandbox
    from producers.sandboxes.browser_host import BrowserHost

    loop = LoopThread()
    blobs = BlobStore(str(tmp_path_factory.mktemp("blobs")))
    host = BrowserHost()
    sandbox = BrowserSandbox(blobs, host=host)
    loop.run(sandbox.start())
    yield loop, sandbox, blobs
    loop.run(sandbox.close())
    loop.run(host.close())
    loop.stop()


def task(name: str, seed: int = 7) -> TaskSpec:
    return TaskSpec(task_id=f"{name}-{seed}", suite="miniwob", name=name, seed=seed)


def test_the_package_ships_the_known_tasks():
    names = task_names()
    assert len(names) >= 100
    assert {"click-test", "click-test-2", "click-button", "enter-text"} <= set(names)


@pytest.mark.parametrize("name", task_names())
def test_every_task_loads_resets_steps_and_reports_reward(env, name):
    loop, sandbox, blobs = env
    obs = loop.run(sandbox.reset(task(name)))
    assert obs.image.shape == (TASK_HEIGHT, TASK_WIDTH, 3)
    assert (obs.observation.screen_width, obs.observation.screen_height) == (TASK_WIDTH, TASK_HEIGHT)
    assert obs.observation.instruction  # every task states what to do
    assert blobs.exists(obs.observation.screenshot.sha256)
    result = loop.run(sandbox.step(Click(x=0.5, y=0.6)))
    assert result.error is None
    assert isinstance(result.done, bool) and -1.0 <= result.reward <= 1.0
    assert result.reward == 0.0 or result.done


def test_same_seed_gives_the_same_screen(env):
    loop, sandbox, _ = env
    first = loop.run(sandbox.reset(task("click-button", seed=3)))
    loop.run(sandbox.reset(task("click-button", seed=4)))
    loop.run(sandbox.step(Click(x=0.5, y=0.5)))
    loop.run(sandbox.reset(task("click-test", seed=4)))  # another task's page becomes current
    again = loop.run(sandbox.reset(task("click-button", seed=3)))  # and this one's comes back
    assert first.observation.instruction == again.observation.instruction
    assert np.array_equal(first.image, again.image)


@pytest.mark.parametrize("name", ["click-test", "click-test-2", "click-button", "enter-text"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_scripted_solver_succeeds(env, name, seed):
    loop, sandbox, _ = env
    obs = loop.run(sandbox.reset(task(name, seed)))
    for _ in range(5):
        dom = loop.run(sandbox.query(scripted.DOM_PROBE_JS))
        result = loop.run(sandbox.step(scripted.solve(name, obs.observation.instruction, dom)))
        if result.done:
            break
    assert result.done and result.success and result.reward > 0.5


def test_fake_clock_makes_the_time_scaled_reward_depend_on_steps_only(env):
    loop, sandbox, _ = env
    rewards = []
    for _ in range(2):
        obs = loop.run(sandbox.reset(task("click-test", 5)))
        loop.run(sandbox.step(Click(x=0.01, y=0.01)))  # a miss: one step of page time passes
        # the hit is rewarded when it happens, before its own step of page time
        dom = loop.run(sandbox.query(scripted.DOM_PROBE_JS))
        rewards.append(loop.run(sandbox.step(scripted.solve("click-test", obs.observation.instruction, dom))).reward)
    assert rewards[0] == rewards[1] == pytest.approx(1.0 - sandbox.step_ms / 10000)


def test_a_step_runs_the_timers_of_the_current_task_page_only(env):
    # each loaded task page keeps its own fake clock: stepping one task must not run the timers and
    # animations of the others (in one shared clock a step's cost grew with every task loaded)
    loop, sandbox, _ = env
    loop.run(sandbox.reset(task("click-test-2")))
    loop.run(sandbox.query("window.__ticks = 0; setInterval(() => { window.__ticks += 1; }, 10); 0"))
    loop.run(sandbox.step(Click(x=0.01, y=0.99)))  # its own clock runs its timer: 100 ms of 10 ms ticks
    own = loop.run(sandbox.query("window.__ticks"))
    loop.run(sandbox.reset(task("click-test")))  # another task's page becomes current
    for _ in range(5):
        loop.run(sandbox.step(Click(x=0.01, y=0.99)))
    loop.run(sandbox.reset(task("click-test-2")))  # back: what ran on its page meanwhile?
    assert own >= 9 and loop.run(sandbox.query("window.__ticks")) == own


def test_sdk_action_is_refused_not_crashed(env):
    from schemas.actions import Shell

    loop, sandbox, _ = env
    loop.run(sandbox.reset(task("click-test")))
    result = loop.run(sandbox.step(Shell(command="ls")))
    assert result.error and "not available" in result.error and not result.done


def test_a_page_script_error_under_the_fake_clock_is_recorded_on_the_step_not_a_crash(env):
    """The page's own timer throwing (jQuery-UI animations did, on click-collapsible and click-tab)
    rejects Playwright's clock.run_for: the step records it and the episode goes on."""
    loop, sandbox, _ = env
    obs = loop.run(sandbox.reset(task("click-test", 3)))
    loop.run(sandbox.query("setTimeout(() => { throw new TypeError('animation broke'); }, 10),"
                           " setTimeout(() => { window.__later = 1; }, 50)"))
    result = loop.run(sandbox.step(Click(x=0.01, y=0.01)))
    assert result.error and result.error.startswith("page script error") and "animation broke" in result.error
    assert not result.done
    assert loop.run(sandbox.query("window.__later")) == 1  # the rest of the step's page time still ran
    dom = loop.run(sandbox.query(scripted.DOM_PROBE_JS))
    final = loop.run(sandbox.step(scripted.solve("click-test", obs.observation.instruction, dom)))
    assert final.error is None and final.done and final.success


def test_a_hung_browser_raises_sandbox_crashed_and_restart_relaunches_it(tmp_path):
    import os
    import signal

    from producers.sandboxes.base import SandboxCrashed
    from producers.sandboxes.browser import BrowserSandbox
    from producers.sandboxes.browser_host import BrowserHost

    require_chromium()
    loop = LoopThread()
    host = BrowserHost()
    sandbox = BrowserSandbox(BlobStore(str(tmp_path)), host=host, call_timeout_s=2.0)
    try:
        loop.run(sandbox.start())
        loop.run(sandbox.reset(task("click-test")))
        hung_pid = host.pid
        os.kill(hung_pid, signal.SIGSTOP)  # alive but unresponsive
        with pytest.raises(SandboxCrashed, match="hung"):
            loop.run(sandbox.step(Click(x=0.5, y=0.5)))
        loop.run(sandbox.restart())
        assert host.pid != hung_pid and host.generation == 2
        obs = loop.run(sandbox.reset(task("click-test")))
        assert obs.image.shape == (TASK_HEIGHT, TASK_WIDTH, 3)
    finally:
        loop.run(sandbox.close())
        loop.run(host.close())
        loop.stop()
