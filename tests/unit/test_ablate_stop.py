"""app.ablation.runs and app.ablation.clean_stop (python -m benchmarks.ablate): a stop (SIGTERM or Ctrl-C) lets the running demo stop
what it started, starts no further run, and leaves a run that did not end on its own out of the table."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from app.ablation import marked, runs as ablate

# stands in for a demo: on SIGTERM or Ctrl-C it takes a while to clean up (stopping its children),
# then exits; further signals do not cut that short (as the demo's handler)
CHILD = """
import signal, sys, time
from pathlib import Path
out = Path(sys.argv[1])
def stop(signum, frame):
    (out / "stopping").write_text(signal.Signals(signum).name)
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, signal.SIG_IGN)
    time.sleep(float(sys.argv[2]))
    (out / "cleaned").write_text("yes")
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
signal.signal(signal.SIGINT, stop)
(out / "ready").write_text("yes")
time.sleep(60)
(out / "ran-to-the-end").write_text("yes")
"""

DRIVER = """
import sys
from app.ablation.clean_stop import run_child, stop_on_signals
stop_on_signals()
try:
    run_child([sys.executable, {child!r}, {out!r}, {cleanup_s!r}], {out!r})
    print("ran to the end")
except KeyboardInterrupt as exc:
    print("stopped", type(exc).__name__)
"""


def _wait_for(path: Path, seconds: float = 20.0) -> None:
    deadline = time.time() + seconds
    while not path.exists():
        assert time.time() < deadline, f"{path.name} never appeared"
        time.sleep(0.05)


@pytest.fixture
def driver(tmp_path):
    procs = []

    def start(cleanup_s: float = 1.0, stderr=None) -> subprocess.Popen:
        (tmp_path / "child.py").write_text(CHILD)
        path = tmp_path / "driver.py"
        path.write_text(textwrap.dedent(DRIVER.format(child=str(tmp_path / "child.py"),
                                                      out=str(tmp_path), cleanup_s=str(cleanup_s))))
        procs.append(subprocess.Popen([sys.executable, str(path)], stdout=subprocess.PIPE, stderr=stderr, text=True,
                                      start_new_session=True))
        _wait_for(tmp_path / "ready")
        return procs[-1]

    yield start
    for p in procs:  # a failing test leaves nothing running
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)


@pytest.mark.parametrize("signum, raised", [(signal.SIGTERM, "Stopped"), (signal.SIGINT, "KeyboardInterrupt")])
def test_a_stop_waits_for_the_demo_to_stop_what_it_started(driver, tmp_path, signum, raised):
    proc = driver()
    os.kill(proc.pid, signum)  # the benchmark only (as a supervisor would): it passes the stop on
    out, _ = proc.communicate(timeout=30)
    assert out.strip() == f"stopped {raised}"
    assert (tmp_path / "stopping").read_text() == "SIGTERM"
    assert (tmp_path / "cleaned").exists(), "the demo was not let stop what it started"
    assert not (tmp_path / "ran-to-the-end").exists()


def test_further_stops_do_not_cut_the_demos_stopping_short(driver, tmp_path):
    proc = driver(cleanup_s=2.0, stderr=subprocess.PIPE)
    os.kill(proc.pid, signal.SIGTERM)
    _wait_for(tmp_path / "stopping")
    for again in (signal.SIGINT, signal.SIGTERM):  # impatient: Ctrl-C, then a supervisor's SIGTERM
        os.kill(proc.pid, again)
        time.sleep(0.2)
    out, err = proc.communicate(timeout=30)
    assert out.strip() == "stopped Stopped" and (tmp_path / "cleaned").exists()
    assert err.count("still stopping") == 2


def test_a_closed_stderr_does_not_fail_the_stop(driver, tmp_path):
    # Ctrl-C in `ablate.py | tee log` ends tee too: writing to the pipe fails (BrokenPipeError)
    proc = driver(cleanup_s=1.0, stderr=subprocess.PIPE)
    proc.stderr.close()
    os.kill(proc.pid, signal.SIGINT)
    assert proc.stdout.read().strip() == "stopped KeyboardInterrupt"
    assert proc.wait(timeout=30) == 0 and (tmp_path / "cleaned").exists()


class Args:
    tag, minutes, tasks, demo_args = "t", 15.0, "default", ""


def test_a_stopped_run_keeps_its_marker_and_no_further_run_starts(tmp_path, monkeypatch):
    def stopped(argv, cwd):
        report = Path(argv[argv.index("--report-dir") + 1])
        (report / "summary.json").write_text("{}")  # a stopped demo still writes its report
        raise KeyboardInterrupt

    monkeypatch.setattr(marked, "run_child", stopped)
    with pytest.raises(KeyboardInterrupt):  # main's loop ends on it: no further run
        ablate.run_one("full", 0, Args, tmp_path)
    assert "stopped after" in (tmp_path / "runs" / "abl-t-full-s0" / ablate.UNFINISHED).read_text()
    assert not ablate.finished("full", 0, tmp_path, "t")
    (tmp_path / "runs" / "abl-t-full-s0" / "logs").mkdir()  # the demo had started
    monkeypatch.setattr(marked, "run_child", lambda argv, cwd: pytest.fail("a spent run id was run again"))
    ablate.run_one("full", 0, Args, tmp_path)


def test_a_run_whose_demo_refused_before_starting_anything_runs_again(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(marked, "run_child", lambda argv, cwd: calls.append(argv) or 2)  # its options refused
    ablate.run_one("full", 0, Args, tmp_path)
    assert "exited with code 2" in (tmp_path / "runs" / "abl-t-full-s0" / ablate.UNFINISHED).read_text()
    report = tmp_path / "runs" / "abl-t-full-s0"
    monkeypatch.setattr(marked, "run_child", lambda argv, cwd: calls.append(argv) or 0)  # no summary written
    ablate.run_one("full", 0, Args, tmp_path)  # the options mended: the same command runs it
    assert "exited with code 0 but wrote no summary.json" in (report / ablate.UNFINISHED).read_text()
    assert not ablate.finished("full", 0, tmp_path, "t")

    def ends(argv, cwd):
        calls.append(argv)
        (report / "summary.json").write_text("{}")
        return 0

    monkeypatch.setattr(marked, "run_child", ends)
    ablate.run_one("full", 0, Args, tmp_path)  # its logs never started: run again, and this time it ends
    assert len(calls) == 3 and not (report / ablate.UNFINISHED).exists()


def test_only_runs_that_ended_on_their_own_are_measured(tmp_path, monkeypatch, capsys):
    def ends(rc: int, notes: list[str]):
        def child(argv, cwd):
            report = Path(argv[argv.index("--report-dir") + 1])
            (report / "summary.json").write_text(json.dumps({"notes": notes}))
            return rc
        return child

    for config, rc, notes in [("full", 0, []), ("coupled-gae", 2, []), ("sync", 0, ["stopped by SIGTERM"])]:
        monkeypatch.setattr(marked, "run_child", ends(rc, notes))
        ablate.run_one(config, 0, Args, tmp_path)
    assert ablate.finished("full", 0, tmp_path, "t")
    assert not ablate.finished("coupled-gae", 0, tmp_path, "t")  # the demo failed
    assert not ablate.finished("sync", 0, tmp_path, "t")  # someone stopped the demo itself
    assert not ablate.finished("fixed-lambda", 0, tmp_path, "t")  # never run
    err = capsys.readouterr().err
    assert "exited with code 2" in err and "stopped by SIGTERM" in err and "not run" in err
    # a run of an earlier benchmark (no marker, no notes) that wrote its summary is measured
    old = tmp_path / "runs" / ablate.run_of("no-rft", 0, "t")
    old.mkdir()
    (old / "summary.json").write_text("{}")
    assert ablate.finished("no-rft", 0, tmp_path, "t")


def test_stoppable_runs_ends_the_loop_on_a_stop_and_measures_after_it(capsys):
    """A stop inside the block ends the loop there, is said once, and the code after the block
    runs (it measures what finished); the broker is left on the way out, and Ctrl-C acts as usual
    again. Without a stop the block runs to its end and says nothing."""
    from contextlib import contextmanager

    from app.ablation.clean_stop import Stopped, stoppable_runs

    entered: list[str] = []

    @contextmanager
    def broker():
        entered.append("in")
        try:
            yield "127.0.0.1:1"
        finally:  # as broker_for_benchmarks stops its broker
            entered.append("out")

    ran = []
    with stoppable_runs("the finished ones are measured", broker=broker):
        for seed in range(3):
            ran.append(seed)
            if seed == 1:
                raise Stopped()  # as SIGTERM raises it in the loop
    assert ran == [0, 1] and entered == ["in", "out"]
    assert capsys.readouterr().err.count("stopped: the finished ones are measured") == 1
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL

    with stoppable_runs("never said", broker=broker):
        ran.append("all")
    assert ran[-1] == "all" and entered == ["in", "out", "in", "out"]
    assert "stopped" not in capsys.readouterr().err


def test_stoppable_runs_lets_a_failure_through():
    """Only a stop is absorbed: an error in a run reaches the caller (after signals are restored)."""
    from contextlib import nullcontext

    from app.ablation.clean_stop import stoppable_runs

    with pytest.raises(ValueError, match="broken run"):
        with stoppable_runs("not said", broker=nullcontext):
            raise ValueError("broken run")
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
