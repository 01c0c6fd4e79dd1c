"""One headless Debian Chromium per process, shared by every browser sandbox (one context + page each).

The host launches Chromium through Playwright with ``executable_path`` (never Playwright's own
browser download) and flags that keep it off the network. When the browser dies or hangs, the
first sandbox to notice calls ``relaunch(generation)``; the generation number makes concurrent
sandboxes share one relaunch instead of each killing the other's fresh browser.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
from typing import Any

import psutil

from infra.runtime.errors import UserError
from producers.sandboxes.base import SandboxCrashed

log = logging.getLogger("flywheel.browser")

# --no-sandbox: Chromium's setuid/namespace sandbox cannot start as root (CI and the demo run as
# root) without it. Containment comes from outside: the pages are MiniWoB++ files served on
# loopback, --disable-background-networking and no extensions; in production the rollout
# Deployment runs as an unprivileged user (app.deploy) where the flag could be dropped.
CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-default-apps", "--disable-extensions", "--mute-audio",
    # Screenshots wait for a frame; without the 60 Hz cap a step takes ~30% less time.
    "--disable-frame-rate-limit", "--disable-gpu-vsync",
)


def find_chromium(explicit: str = "") -> str:
    """The Chromium binary: the configured path, else chromium / chromium-browser on PATH."""
    if explicit:
        if not os.access(explicit, os.X_OK):
            raise UserError(f"browser executable {explicit!r} does not exist or is not executable")
        return explicit
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    raise UserError("Chromium not found: install the Debian package `chromium` (apt-get install chromium)")


def _chromium_mains() -> set[int]:
    """Browser (not renderer/gpu/utility) Chromium processes below this Python process."""
    out = set()
    for proc in psutil.Process().children(recursive=True):
        try:
            cmd = proc.cmdline()
        except psutil.Error:
            continue
        if cmd and "chrom" in os.path.basename(cmd[0]) and not any(a.startswith("--type=") for a in cmd):
            out.add(proc.pid)
    return out


def _kill_tree(pid: int) -> None:
    """SIGKILL a process and everything below it (a Chromium and its renderers), if still there."""
    try:
        proc = psutil.Process(pid)
        for p in [*proc.children(recursive=True), proc]:
            p.kill()
    except psutil.NoSuchProcess:
        pass


class BrowserHost:
    """Owns Playwright and one Chromium; hands out isolated contexts (each with its own clock)."""

    def __init__(self, executable: str = "", launch_timeout_s: float = 60.0) -> None:
        self.executable = find_chromium(executable)
        self.launch_timeout_s = launch_timeout_s
        self.generation = 0
        self.pid: int | None = None
        self._pw: Any = None
        self._browser: Any = None
        self._lock = asyncio.Lock()

    @property
    def connected(self) -> bool:
        return self._browser is not None and self._browser.is_connected()

    async def browser(self) -> tuple[Any, int]:
        """The live browser and its generation, launching it when there is none."""
        async with self._lock:
            if not self.connected:
                await self._launch()
            return self._browser, self.generation

    async def _launch(self) -> None:
        """Start the Playwright driver (once) and Chromium under one deadline; a launch that fails,
        times out or is cancelled stops the driver it started (which closes any Chromium it
        launched) and kills any new Chromium, so nothing half-started is left for the next try."""
        from playwright.async_api import async_playwright

        before = _chromium_mains()
        manager = None
        try:
            async with asyncio.timeout(self.launch_timeout_s):
                if self._pw is None:
                    manager = async_playwright()
                    self._pw = await manager.start()
                self._browser = await self._pw.chromium.launch(
                    executable_path=self.executable, headless=True, args=list(CHROMIUM_FLAGS))
        except BaseException as exc:
            await asyncio.shield(self._discard(manager, _chromium_mains() - before))
            if isinstance(exc, TimeoutError):
                raise SandboxCrashed(f"browser hung: launch took more than {self.launch_timeout_s:g}s") from None
            raise
        self.generation += 1
        new = _chromium_mains() - before
        self.pid = min(new) if new else None
        log.info("chromium launched (generation %d, pid %s)", self.generation, self.pid)

    async def _discard(self, manager: Any, pids: set[int]) -> None:
        """After a failed launch: stop the driver and kill the Chromium processes it left."""
        pw, self._pw, self._browser = self._pw, None, None
        try:
            if pw is not None:
                await asyncio.wait_for(pw.stop(), 10.0)
            elif manager is not None:  # cut off inside the driver's own start
                await asyncio.wait_for(manager.__aexit__(None, None, None), 10.0)
        except Exception:  # noqa: BLE001 - it is being thrown away either way
            pass
        for pid in pids:
            _kill_tree(pid)

    async def relaunch(self, generation: int) -> None:
        """Kill the browser of ``generation`` (dead or hung) so the next ``browser()`` relaunches."""
        async with self._lock:
            if generation != self.generation or self._browser is None:
                return  # another sandbox already replaced it
            log.warning("killing chromium generation %d (pid %s)", generation, self.pid)
            self._kill()
            try:
                await asyncio.wait_for(self._browser.close(), 5.0)
            except Exception:  # noqa: BLE001 - it is dead or hung either way
                pass
            self._browser = None

    def _kill(self) -> None:
        if self.pid is not None:
            _kill_tree(self.pid)

    def renderer_pids(self) -> list[int]:
        """Renderer processes of the current browser (one per page/context): for memory figures."""
        if self.pid is None:
            return []
        try:
            kids = psutil.Process(self.pid).children(recursive=True)
        except psutil.Error:
            return []
        pids = []
        for p in kids:
            try:
                if "--type=renderer" in " ".join(p.cmdline()):
                    pids.append(p.pid)
            except psutil.Error:  # exited meanwhile
                pass
        return pids

    async def close(self) -> None:
        async with self._lock:
            if self._browser is not None:
                try:
                    await asyncio.wait_for(self._browser.close(), 10.0)
                except Exception:  # noqa: BLE001
                    self._kill()
                self._browser = None
            if self._pw is not None:
                try:
                    await asyncio.wait_for(self._pw.stop(), 10.0)
                except Exception:  # noqa: BLE001
                    pass
                self._pw = None


_HOSTS: dict[int, tuple[Any, BrowserHost]] = {}


def shared_host(executable: str = "") -> BrowserHost:
    """One host per event loop (Playwright objects belong to the loop that made them)."""
    loop = asyncio.get_running_loop()
    entry = _HOSTS.get(id(loop))
    if entry is None or entry[0] is not loop:
        entry = _HOSTS[id(loop)] = (loop, BrowserHost(executable))
    return entry[1]


async def close_shared_host() -> None:
    """Close this loop's shared host, if one was ever made."""
    loop = asyncio.get_running_loop()
    entry = _HOSTS.pop(id(loop), None)
    if entry is not None and entry[0] is loop:
        await entry[1].close()
