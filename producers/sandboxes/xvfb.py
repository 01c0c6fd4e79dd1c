"""One private X display per desktop sandbox: Xvfb with an MIT-MAGIC-COOKIE and no TCP.

Xvfb picks a free display number itself (``-displayfd``), so sandboxes started at the same
time never race for one. The cookie is written with ``xauth`` into the sandbox's own
XAUTHORITY file before the server starts (the server loads every cookie in its ``-auth`` file,
whatever display number the entry names) and again under the real number once it is known, for
clients. Only processes given that file can connect; ``-nolisten tcp`` keeps it off the network.
"""

from __future__ import annotations

import asyncio
import ctypes
import secrets
import shutil
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

from producers.sandboxes.base import SandboxCrashed

X_SOCKET_DIR = "/tmp/.X11-unix"  # where Xvfb puts its unix socket; fixed by the X server


def die_with_parent() -> None:
    """preexec_fn: the kernel SIGKILLs the child when this process dies, even by SIGKILL, so a
    crashed worker leaves no orphaned Xvfb or executor behind (Linux PR_SET_PDEATHSIG)."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1 == PR_SET_PDEATHSIG


def missing_programs() -> list[str]:
    """Debian packages' programs the desktop sandbox needs and cannot find (for skip reasons)."""
    return [p for p in ("Xvfb", "xauth") if shutil.which(p) is None]


@dataclass
class XDisplay:
    number: int
    xauthority: str
    proc: asyncio.subprocess.Process
    log_path: str

    @property
    def name(self) -> str:
        return f":{self.number}"

    @property
    def alive(self) -> bool:
        return self.proc.returncode is None

    def env(self) -> dict[str, str]:
        return {"DISPLAY": self.name, "XAUTHORITY": self.xauthority}

    def log_tail(self, n: int = 400) -> str:
        try:
            return Path(self.log_path).read_text(errors="replace")[-n:]
        except OSError:
            return ""

    async def stop(self) -> None:
        if self.alive:
            self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.proc.wait(), 5)
            except asyncio.TimeoutError:
                self.proc.kill()
                await self.proc.wait()


def _xauth_add(path: str, display: str, cookie: str) -> None:
    subprocess.run(["xauth", "-q", "-f", path, "add", display, ".", cookie], check=True,
                   capture_output=True, timeout=10)


async def start_xvfb(workdir: Path, width: int, height: int, depth: int = 24,
                     timeout_s: float = 15.0) -> XDisplay:
    """Start Xvfb on a free display; raises SandboxCrashed if it does not come up."""
    workdir.mkdir(parents=True, exist_ok=True)
    xauthority = str(workdir / "Xauthority")
    cookie = secrets.token_hex(16)
    Path(xauthority).touch(mode=0o600)
    _xauth_add(xauthority, ":0", cookie)  # server side: the display number is ignored
    log_path = str(workdir / "xvfb.log")
    with open(log_path, "wb") as log:
        proc = await asyncio.create_subprocess_exec(
            "Xvfb", "-displayfd", "1", "-screen", "0", f"{width}x{height}x{depth}",
            "-nolisten", "tcp", "-auth", xauthority, "-noreset", "-nocursor",
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=log,
            start_new_session=True, preexec_fn=die_with_parent)
    try:
        line = await asyncio.wait_for(proc.stdout.readline(), timeout_s)
        number = int(line.strip())
    except (asyncio.TimeoutError, ValueError):
        if proc.returncode is None:
            proc.kill()
        await proc.wait()
        raise SandboxCrashed(
            f"Xvfb did not report a display within {timeout_s}s: {Path(log_path).read_text()[-400:]}")
    _xauth_add(xauthority, f":{number}", cookie)  # client side, under the real number
    return XDisplay(number=number, xauthority=xauthority, proc=proc, log_path=log_path)
