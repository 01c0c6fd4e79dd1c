"""A benchmark that runs long children (a whole `flywheel demo` each) and stops cleanly.

    stop_on_signals()            # the first Ctrl-C or SIGTERM raises KeyboardInterrupt / Stopped
    rc = run_child(argv, cwd)    # on a stop: the child stops itself and is waited for, then the stop goes on
    end_stopping()               # after the runs: Ctrl-C and SIGTERM act as usual again (measuring)

or, for a benchmark's loop of runs on one broker, all three in one place:

    with stoppable_runs("what was measured is written"):
        for seed in seeds: ...   # a stop ends the loop here; the code after the block measures

The demo stops itself on Ctrl-C or SIGTERM (its processes stopped, its report written), which
takes a while. Until it has, ``run_child`` neither returns nor raises, and a further stop only
says so: killing the demo then would leave its processes (each in its own session) running.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from contextlib import AbstractContextManager, contextmanager
from typing import Callable, Iterator

from infra.kafka.own_broker import broker_for_benchmarks
from infra.runtime.procs import say, stop_signals


def _say(text: str) -> None:
    """``say`` on the stderr of the moment (none when it was closed: then nothing)."""
    if sys.stderr is not None:
        say(text, file=sys.stderr)


class Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP to the benchmark: it stops as on Ctrl-C."""


_state: dict = {"stops": 0, "child": None}


def _on_stop(signum, frame) -> None:
    _state["stops"] += 1
    if _state["stops"] == 1:  # the first stop: the loop stops where it is
        raise KeyboardInterrupt() if signum == signal.SIGINT else Stopped()
    child = _state["child"]
    if child is not None:
        _say(f"still stopping: the demo (pid {child.pid}) stops its processes and writes its report; "
             "`kill -9` on it would leave them running")


def stop_on_signals() -> None:
    _state["stops"] = 0
    for s in stop_signals():  # SIGHUP too (the terminal closed), unless under nohup
        signal.signal(s, _on_stop)


def end_stopping() -> None:
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if signal.getsignal(signal.SIGHUP) is _on_stop:
        signal.signal(signal.SIGHUP, signal.SIG_DFL)


def run_child(argv: list[str], cwd: Path) -> int:
    """Run ``argv`` to its end; -> its exit code. The child runs in a session of its own, so a
    terminal's Ctrl-C reaches the benchmark only; on a stop (KeyboardInterrupt, Stopped) the child
    gets exactly one SIGTERM, stops itself and is waited for. A second signal would reach a demo
    that may be writing its report, and skip it. Once the child has exited, the stop is raised
    again, so the caller starts nothing more."""
    child = _state["child"] = subprocess.Popen(argv, cwd=cwd, start_new_session=True)
    try:
        return child.wait()
    except KeyboardInterrupt:
        _say("stopping: the running demo stops what it started and writes its report")
        child.send_signal(signal.SIGTERM)
        child.wait()  # later stops do not raise (_on_stop): this returns when the demo has stopped
        raise
    finally:
        _state["child"] = None


@contextmanager
def stoppable_runs(stopped: str,
                   broker: Callable[[], AbstractContextManager] = broker_for_benchmarks) -> Iterator[None]:
    """The body's runs on one broker (started here unless one answers, stopped on the way out),
    with stops handled: the first Ctrl-C or SIGTERM ends the body where it is (``run_child`` lets
    the running demo stop first), prints ``stopped: <stopped>`` and returns normally, so what
    follows the block measures what finished; after it, signals act as usual again."""
    stop_on_signals()
    try:
        with broker():
            yield
    except KeyboardInterrupt:
        print(f"stopped: {stopped}", file=sys.stderr, flush=True)
    finally:
        end_stopping()
