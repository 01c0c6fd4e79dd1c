"""Child processes of the demo: each `flywheel <command>` runs in its own process group with its
output in a log file, and stops with SIGTERM (its own clean shutdown: flush, commit) before a
SIGKILL after a grace period."""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import threading
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger("flywheel.procs")


@dataclass
class Child:
    name: str
    argv: list[str]
    log_path: Path
    env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen | None = None

    def start(self) -> "Child":
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **self.env}
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        log.info("started %s (pid %d): %s", self.name, self.proc.pid, " ".join(self.argv[1:]))
        return self

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def tail(self, lines: int = 5) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, grace: float = 30.0) -> int | None:
        if not self.alive:
            return self.returncode()
        assert self.proc is not None
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            return self.returncode()
        try:
            return self.proc.wait(grace)
        except subprocess.TimeoutExpired:
            log.warning("%s did not stop within %.0fs; killing it", self.name, grace)
            os.killpg(self.proc.pid, signal.SIGKILL)
            return self.proc.wait(10)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` now, for a child process to listen on (it may be taken before
    the child binds it: callers that cannot retry use ``infra.kafka.broker.free_port_block``)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def flywheel_argv(*args: str) -> list[str]:
    """Run a sub-command with the same interpreter (works inside or outside the venv)."""
    return [sys.executable, "-m", "app.cli", *args]


def wait_until(pred, timeout: float, interval: float = 0.5) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(interval)
    return bool(pred())


def stop_on_signals(logger: logging.Logger, what: str = "stopping") -> threading.Event:
    """SIGTERM / SIGINT set the returned event; the caller's loop then shuts down cleanly
    (final flush, commit) instead of dying mid-write."""

    stop = threading.Event()

    def handler(signum, _frame):
        logger.info("signal %d: %s", signum, what)
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    return stop


def stop_signals() -> tuple[int, ...]:
    """The signals on which a long run (the demo, a benchmark of demos) stops cleanly: SIGTERM,
    SIGINT and SIGHUP (a closed terminal's default action would kill the parent alone, leaving its
    children running), unless SIGHUP is ignored: a run under `nohup` goes on after its terminal
    closes."""
    hup = () if signal.getsignal(signal.SIGHUP) is signal.SIG_IGN else (signal.SIGHUP,)
    return (signal.SIGTERM, signal.SIGINT, *hup)


def say(text: str, file=None) -> None:
    """A line of a stopping path that cannot fail it: a `| tee` that Ctrl-C ended closes the pipe
    (BrokenPipeError), a signal handler may write while print is mid-line (RuntimeError)."""
    try:
        print(text, file=file or sys.stdout, flush=True)
    except (OSError, ValueError, RuntimeError):
        pass
