"""benchmarks/ablate.py: a stop (SIGTERM or Ctrl-C) lets the running demo stop what it started,
starts no further run, and leaves the cut-short run out of the table."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCH))
import ablate  # noqa: E402

# stands in for a demo: on SIGTERM it takes a moment to clean up (stopping its children), then exits
CHILD = """
import signal, sys, time
from pathlib import Path
out = Path(sys.argv[1])
def stop(signum, frame):
    time.sleep(1.0)
    (out / "cleaned").write_text("yes")
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
(out / "ready").write_text("yes")
time.sleep(60)
(out / "ran-to-the-end").write_text("yes")
"""

DRIVER = """
import signal, sys
sys.path.insert(0, {bench!r})
import ablate
signal.signal(signal.SIGTERM, ablate._stopped)
try:
    ablate.run_child([sys.executable, {child!r}, {out!r}], grace_s=0.2, stop_s=20)
    print("ran to the end")
except KeyboardInterrupt as exc:
    print("stopped", type(exc).__name__)
"""


def _wait_for(path: Path, seconds: float = 20.0) -> None:
    deadline = time.time() + seconds
    while not path.exists():
        assert time.time() < deadline, f"{path.name} never appeared"
        time.sleep(0.05)


def test_a_sigterm_waits_for_the_demo_to_stop_what_it_started(tmp_path):
    (tmp_path / "child.py").write_text(CHILD)
    driver = tmp_path / "driver.py"
    driver.write_text(textwrap.dedent(DRIVER.format(bench=str(BENCH), child=str(tmp_path / "child.py"),
                                                    out=str(tmp_path))))
    proc = subprocess.Popen([sys.executable, str(driver)], stdout=subprocess.PIPE, text=True)
    _wait_for(tmp_path / "ready")
    os.kill(proc.pid, signal.SIGTERM)  # the benchmark only, as a supervisor would
    out, _ = proc.communicate(timeout=30)
    assert out.strip() == "stopped Stopped"
    assert (tmp_path / "cleaned").exists(), "the demo was not let stop what it started"
    assert not (tmp_path / "ran-to-the-end").exists()


def test_a_run_cut_short_is_not_measured_nor_run_again(tmp_path, capsys):
    runs = tmp_path / "runs"
    for config in ("full", "coupled-gae"):
        d = runs / ablate.run_of(config, 0, "t")
        d.mkdir(parents=True)
        (d / "summary.json").write_text("{}")  # a stopped demo still writes its report
    (runs / ablate.run_of("coupled-gae", 0, "t") / ablate.STOPPED).write_text("stopped after 3.0 of 15 min\n")
    assert ablate.finished("full", 0, tmp_path, "t")
    assert not ablate.finished("coupled-gae", 0, tmp_path, "t")
    assert not ablate.finished("sync", 0, tmp_path, "t")
    err = capsys.readouterr().err
    assert "coupled-gae seed 0: cut short by a stop" in err and "sync seed 0: no finished run" in err

    class Args:
        tag, minutes, tasks, demo_args = "t", 15.0, "default", ""
    ablate.run_one("coupled-gae", 0, Args, tmp_path)  # must not start a demo: the run id is spent
    assert "cut short by a stop before" in capsys.readouterr().out
