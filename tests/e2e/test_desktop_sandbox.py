"""The desktop sandbox on a real Xvfb display with real mousepad and xterm.

Every task is solved by its scripted solver; verifiers reject wrong results; SDK actions that try
to leave the jail are refused on the step, and without bwrap shell commands are refused (fail
closed) unless allow_weak_isolation is set; a killed X server raises SandboxCrashed and a
restarted sandbox works again.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal

import numpy as np
import pytest

from producers.sandboxes.base import SANDBOX_REGISTRY, SandboxCrashed
import producers.sandboxes.desktop  # noqa: F401  registers sandbox "desktop"
from producers.sandboxes.desktop_tasks import DESKTOP_TASKS, get_task
from producers.sandboxes.xvfb import missing_programs
from schemas.actions import Click, FileRead, FileWrite, Finished, Hotkey, OpenApp, PressHome, Shell, Type
from schemas.blobs import BlobStore
from schemas.events import TaskSpec

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


def require_desktop() -> None:
    missing = missing_programs() + [p for p in ("mousepad", "xterm") if shutil.which(p) is None]
    if missing:
        pytest.skip(f"desktop sandbox needs {missing} (apt: xvfb xauth mousepad xterm)")


class Runner:
    """One event loop for a sandbox's whole life: its subprocesses belong to that loop."""

    def __init__(self, blobs: BlobStore, **fields) -> None:
        self.loop = asyncio.new_event_loop()
        self.sandbox = SANDBOX_REGISTRY["desktop"](blobs, **fields)
        self.run(self.sandbox.start())

    def run(self, coro):
        return self.loop.run_until_complete(coro)

    def reset(self, name: str, seed: int = 0, **params):
        spec = TaskSpec(task_id=f"{name}-{seed}", suite="desktop", name=name, seed=seed, params=params)
        return self.run(self.sandbox.reset(spec))

    def steps(self, actions):
        return [self.run(self.sandbox.step(a)) for a in actions]

    def close(self) -> None:
        self.run(self.sandbox.close())
        self.loop.close()


@pytest.fixture(scope="module")
def blobs(tmp_path_factory):
    return BlobStore(str(tmp_path_factory.mktemp("desktop-blobs")))


@pytest.fixture(scope="module")
def env(blobs):
    require_desktop()
    runner = Runner(blobs, width=800, height=600, sdk_timeout_s=2.0)
    yield runner
    runner.close()


@pytest.mark.parametrize("name", sorted(DESKTOP_TASKS))
def test_scripted_solver_succeeds(env, blobs, name):
    task = get_task(name)
    obs = env.reset(name, seed=5)
    assert obs.image.shape == (600, 800, 3) and obs.image.dtype == np.uint8
    assert obs.observation.instruction == task.instruction(task.params(5, {}))
    assert blobs.exists(obs.observation.screenshot.sha256)
    results = env.steps(task.solve(task.params(5, {})))
    assert [r.error for r in results] == [None] * len(results)
    assert results[-1].done and results[-1].success and results[-1].reward == 1.0
    assert not any(r.done for r in results[:-1])


def test_editor_rejects_the_wrong_text(env):
    env.reset("desktop.type-in-editor", text="right words")
    result = env.steps([Click(x=0.3, y=0.3), Type(content="wrong words"), Hotkey(key="ctrl s")])[-1]
    assert not result.done and result.reward == 0.0
    finished = env.steps([Finished()])[0]
    assert finished.done and not finished.success and finished.reward == 0.0


def test_hybrid_rejects_the_sdk_alone(env):
    task = get_task("desktop.hybrid-append")
    p = task.params(1, {})
    env.reset(task.name, seed=1)
    result = env.steps([FileWrite(path=p["file"], content=f"{p['first']}\n{p['second']}\n"), Finished()])[-1]
    assert result.done and not result.success  # the file is right but the editor never saw it


def test_terminal_rejects_the_wrong_word(env):
    env.reset("desktop.terminal-echo", word="orbit")
    result = env.steps([Click(x=0.3, y=0.3), Type(content="echo river > out.txt\n"), Finished()])[-1]
    assert result.done and not result.success


def test_sdk_actions_run_in_the_jail_and_refusals_are_recorded(env):
    env.reset("desktop.terminal-echo")
    inside = env.sandbox.agent_workdir  # /home/agent/work under bwrap
    ok = env.steps([FileWrite(path="sub.txt", content="x"), FileRead(path=f"{inside}/sub.txt"),
                    Shell(command="cat sub.txt; pwd")])
    assert [r.error for r in ok] == [None, None, None]
    assert ok[1].output == "x" and f"x{inside}\n" in ok[2].output
    refused = env.steps([FileRead(path="../../etc/passwd"), FileWrite(path="/tmp/evil", content="x"),
                         Shell(command="ln -s /etc escape"), FileRead(path="escape/passwd")])
    assert "leaves" in refused[0].error and "leaves" in refused[1].error
    assert refused[2].error is None and "symlink" in refused[3].error
    assert not os.path.exists("/tmp/evil")
    slow = env.steps([Shell(command="sleep 30")])[0]
    assert "timed out" in slow.error and not slow.done


def test_unsupported_actions_are_errors_not_crashes(env):
    env.reset("desktop.terminal-echo")
    home, app, weird = env.steps([PressHome(), OpenApp(app_name="photoshop"), Type(content="é")])
    assert "press_home" in home.error and "photoshop" in app.error and "cannot type" in weird.error
    opened = env.steps([OpenApp(app_name="mousepad")])[0]
    assert opened.error is None


def test_killing_xvfb_mid_episode_raises_sandbox_crashed_and_restart_recovers(blobs):
    require_desktop()
    runner = Runner(blobs, width=640, height=480, rpc_timeout_s=5.0)
    try:
        runner.reset("desktop.terminal-echo")
        runner.steps([Click(x=0.3, y=0.3)])
        os.kill(runner.sandbox.display.proc.pid, signal.SIGKILL)
        with pytest.raises(SandboxCrashed):
            runner.steps([Type(content="echo hi\n")])
        runner.run(runner.sandbox.close())  # what the worker does before restarting
        runner.run(runner.sandbox.start())
        task = get_task("desktop.terminal-echo")
        runner.reset(task.name, seed=2)
        assert runner.steps(task.solve(task.params(2, {})))[-1].success
    finally:
        runner.close()


def test_a_hung_x_server_raises_sandbox_crashed(blobs):
    require_desktop()
    runner = Runner(blobs, width=640, height=480, rpc_timeout_s=2.0, settle_max_ms=200)
    try:
        runner.reset("desktop.terminal-echo")
        os.kill(runner.sandbox.display.proc.pid, signal.SIGSTOP)
        try:
            with pytest.raises(SandboxCrashed, match="did not answer"):
                runner.steps([Click(x=0.3, y=0.3)])
        finally:
            os.kill(runner.sandbox.display.proc.pid, signal.SIGCONT)
    finally:
        runner.close()


def test_two_sandboxes_in_one_loop_stay_apart(blobs):
    """Own display, own cookie, own mousepad instance (no shared D-Bus session) per sandbox."""
    require_desktop()
    loop = asyncio.new_event_loop()
    sandboxes = [SANDBOX_REGISTRY["desktop"](blobs, width=640, height=480) for _ in range(2)]
    task = get_task("desktop.type-in-editor")

    async def episode(sandbox, text):
        await sandbox.start()
        await sandbox.reset(TaskSpec(task_id=text.replace(" ", "-"), suite="desktop", name=task.name, params={"text": text}))
        results = [await sandbox.step(a) for a in task.solve(task.params(0, {"text": text}))]
        return results[-1].success, (sandbox.jail / "note.txt").read_text().strip()

    async def both():
        try:
            return await asyncio.gather(episode(sandboxes[0], "first one"), episode(sandboxes[1], "second one"))
        finally:
            for sandbox in sandboxes:
                await sandbox.close()

    try:
        assert loop.run_until_complete(both()) == [(True, "first one"), (True, "second one")]
    finally:
        loop.close()


@pytest.mark.parametrize("allow_weak", [False, True])
def test_without_bwrap_shell_commands_fail_closed_on_the_step(blobs, allow_weak):
    require_desktop()
    runner = Runner(blobs, width=640, height=480, sdk_timeout_s=2.0, isolation="none",
                    allow_weak_isolation=allow_weak)
    try:
        runner.reset("desktop.terminal-echo")
        shell, write = runner.steps([Shell(command="echo hi"), FileWrite(path="a.txt", content="x")])
        if allow_weak:  # explicitly allowed: it runs, weakly isolated
            assert shell.error is None and shell.output.startswith("hi\n")
        else:
            assert "refused" in shell.error and "fails closed" in shell.error and not shell.done
        assert write.error is None  # file actions are path-checked in-process, unaffected
    finally:
        runner.close()
