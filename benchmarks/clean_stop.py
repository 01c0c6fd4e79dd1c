"""A benchmark that runs long children (a whole `flywheel demo` each) and stops cleanly.

    stop_on_sigterm()            # SIGTERM raises Stopped, as Ctrl-C raises KeyboardInterrupt
    rc = run_child(argv, cwd)    # on a stop: the child stops itself, is waited for, then the stop goes on

The demo stops itself on Ctrl-C or SIGTERM (its processes stopped, its report written), which
takes a while. A second Ctrl-C or SIGTERM during that wait tells it again at once; a third kills
it. Whatever happens, ``run_child`` does not return or raise while its child still runs.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path


class Stopped(KeyboardInterrupt):
    """SIGTERM to the benchmark: it stops as on Ctrl-C."""


def _raise_stopped(signum, frame) -> None:
    raise Stopped()


def stop_on_sigterm() -> None:
    signal.signal(signal.SIGTERM, _raise_stopped)


def run_child(argv: list[str], cwd: Path, grace_s: float = 3.0) -> int:
    """Run ``argv`` to its end; -> its exit code. On a stop (KeyboardInterrupt, Stopped) the child
    is let stop itself: Ctrl-C in a terminal reached it too; otherwise, after ``grace_s``, it gets
    a SIGTERM. Once it has exited, the stop is raised again, so the caller starts nothing more."""
    # (not with SIGINT and SIGTERM blocked around it, against a stop before the handle is held:
    # the child would inherit the blocked mask and never see either)
    child = subprocess.Popen(argv, cwd=cwd)
    try:
        return child.wait()
    except KeyboardInterrupt:
        _wait_stopping(child, grace_s)
        raise
    finally:
        if child.poll() is None:  # only where waiting itself failed
            child.kill()
            child.wait()


def _wait_stopping(child: subprocess.Popen, grace_s: float) -> None:
    """Wait for ``child`` to stop itself; a further stop SIGTERMs it at once, the one after kills it."""
    more = {"n": 0}

    def escalate(signum, frame) -> None:
        more["n"] += 1
        if more["n"] == 1:
            print("stopping: the run is told again (once more kills it)", file=sys.stderr, flush=True)
            child.send_signal(signal.SIGTERM)
        else:
            print("stopping: the run is killed", file=sys.stderr, flush=True)
            child.kill()

    previous = {s: signal.signal(s, escalate) for s in (signal.SIGINT, signal.SIGTERM)}
    print("stopping: the running demo stops what it started and writes its report "
          "(Ctrl-C again to hurry it)", file=sys.stderr, flush=True)
    try:
        try:
            child.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            child.send_signal(signal.SIGTERM)  # harmless where Ctrl-C already reached it: it is stopping
        child.wait()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
