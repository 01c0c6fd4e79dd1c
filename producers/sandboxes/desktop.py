"""The desktop sandbox: Xvfb + real programs + pyautogui, registered as sandbox "desktop".

One sandbox owns one private display (producers.sandboxes.xvfb), one executor child that
drives it with pyautogui and grabs screenshots (producers.sandboxes.x_executor: a child per
display because pyautogui binds to $DISPLAY at import), and one episode folder. ``reset``
clears the screen, makes a fresh jail (producers.sandboxes.jail), writes the task's files and
starts its programs inside the jail; ``step`` performs a unified action: GUI actions through
``schemas.convert.to_pyautogui``, GUI-SDK actions (shell, file_read, file_write) in the jail,
``open_app`` by starting a known program, ``wait`` by sleeping. After every action the task's
verifier looks at the resulting state: success ends the episode with reward 1; ``finished`` /
``call_user`` end it with the verifier's answer.

Failures: an action the display or the jail refuses goes to ``StepResult.error`` and the episode
goes on. A dead or unresponsive X server, a dead executor, or a task program killed by a signal
raise ``SandboxCrashed``; the worker aborts the episode as an infrastructure failure and calls
``close()`` then ``start()`` again. Hung GUI programs are not detected unless they hang the X
server (there is no window manager to send _NET_WM_PING).

Screenshots go to the blob store passed to the constructor as PNG (``BlobStore.put``, at a
fast zlib level: the same image ``put_image`` would store, compressed less).
"""

from __future__ import annotations

import asyncio
import dataclasses
import io
import logging
import os
import re
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson
from PIL import Image
from pydantic import TypeAdapter

from infra.runtime.config import describe, opt
from producers.sandboxes import desktop_tasks as tasks
from producers.sandboxes.base import Obs, SandboxCrashed, StepResult, register_sandbox
from producers.sandboxes.jail import (
    JailSpec, SdkError, format_shell_result, jail_argv, probe_isolation, read_jailed, run_shell,
    weakness, write_jailed,
)
from producers.sandboxes.xvfb import X_SOCKET_DIR, XDisplay, die_with_parent, start_xvfb
from schemas.actions import Action
from schemas.blobs import BlobStore
from schemas.convert import UnsupportedAction, to_pyautogui
from schemas.events import Observation, TaskSpec

log = logging.getLogger(__name__)
_ACTION = TypeAdapter(Action)
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])  # so the executor child imports us
OPEN_APPS = {"mousepad": tasks.EDITOR, "editor": tasks.EDITOR, "text editor": tasks.EDITOR,
             "xterm": tasks.TERMINAL, "terminal": tasks.TERMINAL}
GTK_SETTINGS = "[Settings]\ngtk-cursor-blink=false\ngtk-enable-animations=false\n"


@dataclass
class DesktopConfig:
    width: int = opt(1024, "screen width of each sandbox's Xvfb display, pixels")
    height: int = opt(768, "screen height of each sandbox's Xvfb display, pixels")
    settle_ms: float = opt(30.0, "screenshot when two grabs this far apart are equal")
    settle_max_ms: float = opt(1500.0, "screenshot anyway after this long if the screen keeps changing")
    wait_s: float = opt(1.0, "how long a `wait` action sleeps")
    rpc_timeout_s: float = opt(15.0, "a display that does not answer within this is crashed")
    app_start_timeout_s: float = opt(20.0, "a task program whose window is not up within this is crashed")
    sdk_timeout_s: float = opt(10.0, "wall-clock limit of one GUI-SDK shell command")
    sdk_output_cap: int = opt(65536, "bytes of shell output / file_read kept; a command past it is killed")
    sdk_file_cap: int = opt(1 << 20, "largest file a GUI-SDK action may write, bytes")
    png_compress_level: int = opt(1, "zlib level of stored PNG screenshots (1 fast ... 9 small)")
    isolation: str = opt("auto", "how SDK commands and task programs are jailed",
                         choices=("auto", "bwrap", "unshare", "none"))
    workdir: str = opt("", "folder for displays' auth files and episode jails; empty: a temp folder")
    allow_weak_isolation: bool = opt(False, "run GUI-SDK shell commands even without bwrap and cgroup limits "
                                            "(unshare -n or nothing); off: such commands are refused")


class _Executor:
    """Parent side of producers.sandboxes.x_executor: one request at a time, every one timed."""

    def __init__(self, proc: asyncio.subprocess.Process, timeout_s: float, log_path: str) -> None:
        self.proc, self.timeout_s, self.log_path = proc, timeout_s, log_path
        self.lock = asyncio.Lock()

    @classmethod
    async def spawn(cls, env: dict[str, str], timeout_s: float, log_path: str) -> "_Executor":
        with open(log_path, "ab") as err:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "producers.sandboxes.x_executor", env=env,
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=err,
                limit=1 << 24, start_new_session=True, preexec_fn=die_with_parent)
        return cls(proc, timeout_s, log_path)

    def _tail(self) -> str:
        try:
            return Path(self.log_path).read_text(errors="replace")[-300:].strip()
        except OSError:
            return ""

    async def request(self, msg: dict, extra_s: float = 0.0) -> tuple[dict, bytes]:
        async with self.lock:
            if self.proc.returncode is not None:
                raise SandboxCrashed(f"display executor exited ({self.proc.returncode}): {self._tail()}")
            try:
                self.proc.stdin.write(orjson.dumps(msg) + b"\n")
                await self.proc.stdin.drain()
                line = await asyncio.wait_for(self.proc.stdout.readline(), self.timeout_s + extra_s)
                if not line:
                    raise SandboxCrashed(f"display executor died: {self._tail()}")
                head = orjson.loads(line)
                payload = await asyncio.wait_for(
                    self.proc.stdout.readexactly(head["nbytes"]), self.timeout_s) if head["nbytes"] else b""
            except asyncio.TimeoutError:
                self.kill()
                raise SandboxCrashed(f"display did not answer {msg['op']!r} within "
                                     f"{self.timeout_s + extra_s:.0f}s (hung X server?)") from None
            except (BrokenPipeError, ConnectionResetError, asyncio.IncompleteReadError) as e:
                raise SandboxCrashed(f"display executor pipe broke: {e}; {self._tail()}") from None
        if "fatal" in head:
            raise SandboxCrashed(f"display failed: {head['fatal']}")
        return head, payload

    def kill(self) -> None:
        if self.proc.returncode is None:
            self.proc.kill()


class DesktopSandbox:
    kind = "desktop"

    def __init__(self, blobs: BlobStore, config: DesktopConfig | None = None) -> None:
        self.blobs = blobs
        self.cfg = config or DesktopConfig()
        self.isolation = probe_isolation() if self.cfg.isolation == "auto" else self.cfg.isolation
        self.display: XDisplay | None = None
        self.executor: _Executor | None = None
        self.root: Path | None = None
        self.apps: list[asyncio.subprocess.Process] = []
        self.task: tasks.DesktopTask | None = None
        self.params: dict = {}
        self.instruction = ""

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        if self.display is not None:
            return
        why = weakness(JailSpec(host="", isolation=self.isolation))
        if why and self.cfg.allow_weak_isolation:
            log.warning("desktop sandbox: %s; SDK shell commands run with WEAK isolation (allowed)", why)
        elif why:
            log.warning("desktop sandbox: %s; SDK shell commands will be refused (fail closed)", why)
        self.root = Path(tempfile.mkdtemp(prefix="flywheel-desktop-", dir=self.cfg.workdir or None))
        self.display = await start_xvfb(self.root, self.cfg.width, self.cfg.height)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": _PACKAGE_ROOT,
               "LANG": "C.UTF-8", **self.display.env()}
        self.executor = await _Executor.spawn(env, self.cfg.rpc_timeout_s, str(self.root / "executor.log"))
        await self.executor.request({"op": "ping"}, extra_s=15)  # includes importing pyautogui
        log.info("desktop sandbox up on %s, isolation=%s, config=%s", self.display.name,
                 self.isolation, describe(self.cfg))

    async def close(self) -> None:
        if self.executor is not None and self.display is not None and self.display.alive:
            try:  # programs started from the terminal left our process groups (outside bwrap)
                await self.executor.request({"op": "kill_clients"})
            except SandboxCrashed:
                pass
        await self._stop_apps()
        if self.executor is not None:
            self.executor.kill()
            await self.executor.proc.wait()
        if self.display is not None:
            await self.display.stop()
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
        self.display = self.executor = self.root = None

    async def reset(self, task: TaskSpec) -> Obs:
        self._check_alive()
        self.task = tasks.get_task(task.name)
        self.params = self.task.params(task.seed, dict(task.params))
        self.instruction = self.task.instruction(self.params)
        await self._stop_apps()
        await self.executor.request({"op": "kill_clients"})
        self._fresh_episode_dir()
        self.task.setup(self.jail, self.params)
        for app in self.task.apps(self.params):
            await self._launch(app.argv)
            await self._wait_for_window(app.title)
        obs, _ = await self._observe()
        return obs

    async def step(self, action: Any) -> StepResult:
        self._check_alive()
        if self.task is None:
            raise RuntimeError("step() before reset()")
        if isinstance(action, dict):
            action = _ACTION.validate_python(action)
        error, output = await self._perform(action)
        self._check_apps()
        obs, windows = await self._observe(with_windows=self.task.needs_windows)
        verdict = self.task.verify(tasks.DesktopState(self.jail, windows), self.params)
        done = verdict.success or action.type in ("finished", "call_user")
        return StepResult(obs=obs, reward=1.0 if verdict.success else 0.0, done=done,
                          success=verdict.success, error=error, output=output)

    # ------------------------------------------------------------ actions

    async def _perform(self, action: Any) -> tuple[str | None, str | None]:
        """Execute one action; returns (error for the step, output for the agent)."""
        kind = action.type
        try:
            if kind == "shell":
                result = await run_shell(self._spec(gui=False), action.command, self._env(gui=False),
                                         self.cfg.sdk_timeout_s, self.cfg.sdk_output_cap, self.cfg.sdk_file_cap)
                output, error = format_shell_result(result, self.cfg.sdk_timeout_s, self.cfg.sdk_output_cap)
                return error, output
            if kind == "file_read":
                return None, await asyncio.to_thread(read_jailed, self.jail, action.path,
                                                     self.cfg.sdk_output_cap, self._spec().workdir)
            if kind == "file_write":
                n = await asyncio.to_thread(write_jailed, self.jail, action.path, action.content,
                                            self.cfg.sdk_file_cap, self._spec().workdir)
                return None, f"wrote {n} bytes to {action.path}"
            if kind == "open_app":
                argv = OPEN_APPS.get(action.app_name.strip().lower())
                if argv is None:
                    return f"unknown app {action.app_name!r}; known: {sorted(OPEN_APPS)}", None
                await self._launch(argv)
                await asyncio.sleep(self.cfg.wait_s)
                return None, None
            if kind == "wait":
                await asyncio.sleep(self.cfg.wait_s)
                return None, None
            calls = to_pyautogui(action, self.cfg.width, self.cfg.height)
        except (SdkError, UnsupportedAction) as e:
            return str(e), None
        if not calls:
            return None, None
        sleeping = sum(float(a[0]) for n, a, _ in calls if n == "sleep")
        head, _ = await self.executor.request({"op": "calls", "calls": calls}, extra_s=sleeping + 5)
        return (None if head["ok"] else head["error"]), None

    # ------------------------------------------------------------ observation

    async def _observe(self, with_windows: bool = True) -> tuple[Obs, list[dict]]:
        head, raw = await self.executor.request(
            {"op": "screenshot", "settle_ms": self.cfg.settle_ms, "max_ms": self.cfg.settle_max_ms},
            extra_s=self.cfg.settle_max_ms / 1000)
        w, h = head["width"], head["height"]
        image = np.frombuffer(raw, dtype=np.uint8).reshape(h, w, 3)
        ref = await asyncio.to_thread(self._store_png, image)
        windows = (await self.executor.request({"op": "windows"}))[0]["windows"] if with_windows else []
        observation = Observation(screenshot=ref, screen_width=w, screen_height=h,
                                  instruction=self.instruction,
                                  window_title=windows[-1]["title"] if windows else "")
        return Obs(observation=observation, image=image), windows

    def _store_png(self, image: np.ndarray):
        buf = io.BytesIO()  # put_image's PNG at a fast compression level: ~4x quicker, ~1.3x larger
        Image.fromarray(image).save(buf, format="PNG", compress_level=self.cfg.png_compress_level)
        return self.blobs.put(buf.getvalue(), "image/png", image.shape[1], image.shape[0])

    async def _wait_for_window(self, title_regex: str) -> None:
        pattern = re.compile(title_regex)
        deadline = time.monotonic() + self.cfg.app_start_timeout_s
        while time.monotonic() < deadline:
            head, _ = await self.executor.request({"op": "windows"})
            if any(pattern.search(w["title"]) for w in head["windows"]):
                return
            if any(proc.returncode is not None for proc in self.apps):
                raise SandboxCrashed(f"a task program exited before its window /{title_regex}/ "
                                     f"appeared: {self._apps_log_tail()}")
            await asyncio.sleep(0.05)
        raise SandboxCrashed(f"no window titled /{title_regex}/ within {self.cfg.app_start_timeout_s}s")

    # ------------------------------------------------------------ processes and folders

    @property
    def jail(self) -> Path:
        """The episode's working directory on this machine."""
        return self.root / "episode" / "work"

    @property
    def agent_workdir(self) -> str:
        """The same directory as the jailed programs (and the screenshots) show it."""
        return self._spec().workdir

    def _fresh_episode_dir(self) -> None:
        episode = self.root / "episode"
        shutil.rmtree(episode, ignore_errors=True)
        self.jail.mkdir(parents=True)
        config = episode / "home" / ".config" / "gtk-3.0"
        config.mkdir(parents=True)
        (config / "settings.ini").write_text(GTK_SETTINGS)  # no blinking cursor: stable screenshots
        (episode / "home" / "run").mkdir(mode=0o700)

    def _spec(self, gui: bool = False) -> JailSpec:
        ro = (X_SOCKET_DIR, self.display.xauthority) if gui else ()
        return JailSpec(host=str(self.root / "episode"), isolation=self.isolation, ro_binds=ro,
                        allow_weak=self.cfg.allow_weak_isolation)

    def _env(self, gui: bool) -> dict[str, str]:
        home = self._spec().home
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": home, "LANG": "C.UTF-8",
               "TMPDIR": "/tmp", "XDG_CONFIG_HOME": f"{home}/.config", "XDG_CACHE_HOME": f"{home}/.cache",
               "XDG_DATA_HOME": f"{home}/.local/share", "XDG_RUNTIME_DIR": f"{home}/run"}
        if gui:  # no D-Bus session: each sandbox's mousepad must be its own instance
            env |= {**self.display.env(), "GSETTINGS_BACKEND": "memory", "NO_AT_BRIDGE": "1"}
        return env

    async def _launch(self, argv: tuple[str, ...]) -> None:
        with open(self.root / "apps.log", "ab") as out:
            proc = await asyncio.create_subprocess_exec(
                *jail_argv(self._spec(gui=True), list(argv)), cwd=str(self.jail), env=self._env(gui=True),
                stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True)
        self.apps.append(proc)

    def _apps_log_tail(self) -> str:
        try:
            return (self.root / "apps.log").read_text(errors="replace")[-300:].strip()
        except OSError:
            return ""

    def _check_apps(self) -> None:
        """A task program killed by a signal (not by us) is a crash, not the agent's doing."""
        for proc in self.apps:
            code = proc.returncode
            if code is not None and (code < 0 or code > 128):  # bwrap reports 128+signal
                raise SandboxCrashed(f"program {proc.pid} died with status {code}")

    async def _stop_apps(self) -> None:
        for proc in self.apps:
            if proc.returncode is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)  # bwrap --die-with-parent takes its tree
                except ProcessLookupError:
                    pass
            await proc.wait()
        self.apps = []

    def _check_alive(self) -> None:
        if self.display is None or self.executor is None:
            raise SandboxCrashed("desktop sandbox is not started")
        if not self.display.alive:
            raise SandboxCrashed(f"Xvfb {self.display.name} exited ({self.display.proc.returncode}): "
                                 f"{self.display.log_tail()}")


@register_sandbox("desktop")
def make_desktop_sandbox(blobs: BlobStore, config: DesktopConfig | None = None, **fields: Any) -> DesktopSandbox:
    """Registry factory: ``fields`` override single DesktopConfig fields (e.g. width=800)."""
    return DesktopSandbox(blobs, dataclasses.replace(config or DesktopConfig(), **fields))
