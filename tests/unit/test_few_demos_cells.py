"""The few-demonstrations benchmark's cells (app.ablation.few_demos_runs) with a fake demo: a cell
is kept and measured only where its demo ended on its own; a stopped or cut-off one is reported,
never measured, and never run again under its id (its topics already hold its demonstrations)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from app.ablation import marked
from app.ablation.marked import UNFINISHED
from app.few_demos import TASKS, Cell
from app.ablation import few_demos_runs as B

COMMIT = {"commit": "0" * 40, "dirty": []}


def _fake_demo(monkeypatch, notes=(), rc=0, stop=False):
    """run_child replaced by a demo that writes its summary (with ``notes``) and exits ``rc``, or
    is stopped (KeyboardInterrupt, after it wrote its report); -> the argvs it was given."""
    ran: list[list[str]] = []

    def child(argv, cwd):
        ran.append(argv)
        report = argv[argv.index("--report-dir") + 1]
        Path(report, "logs").mkdir(exist_ok=True)  # a demo that started: its run id is spent
        after = {t: 0.5 for t in TASKS}
        with open(f"{report}/summary.json", "w") as f:
            json.dump({"run_id": argv[argv.index("--run-id") + 1], "after": after, "notes": list(notes)}, f)
        if stop:
            raise KeyboardInterrupt
        return rc

    monkeypatch.setattr(marked, "run_child", child)
    monkeypatch.setenv("FLYWHEEL_TOPIC_PREFIX", "unchanged.")
    return ran


def _args():
    return argparse.Namespace(tag="", minutes=20.0, demo_args="", use="clone")


def test_a_cell_that_ended_on_its_own_is_kept_measured_and_names_its_commit(tmp_path, monkeypatch):
    ran = _fake_demo(monkeypatch)
    cell = Cell(0, 0)
    B.run_cell(cell, list(TASKS), _args(), tmp_path, COMMIT)
    run_dir = tmp_path / "runs" / cell.name()
    assert B.state(run_dir) == "finished" and not (run_dir / UNFINISHED).exists()
    assert json.loads((run_dir / "commit.json").read_text())["commit"] == COMMIT["commit"]
    assert B.measured(cell, list(TASKS), tmp_path, "")["success"] == {t: 0.5 for t in TASKS}
    B.run_cell(cell, list(TASKS), _args(), tmp_path, COMMIT)
    assert len(ran) == 1  # kept, not run again


@pytest.mark.parametrize("how", ["stopped by someone else", "failed", "stopped by the benchmark"])
def test_a_cell_that_did_not_end_on_its_own_is_never_measured_nor_run_again(tmp_path, monkeypatch, capsys, how):
    fake = {"stopped by someone else": {"notes": ["stopped by SIGTERM after 4.0 of 20 min"]},
            "failed": {"rc": 1}, "stopped by the benchmark": {"stop": True}}[how]
    ran = _fake_demo(monkeypatch, **fake)
    cell = Cell(0, 1)
    run_dir = tmp_path / "runs" / cell.name()
    if how == "stopped by the benchmark":
        with pytest.raises(KeyboardInterrupt):
            B.run_cell(cell, list(TASKS), _args(), tmp_path, COMMIT)
    else:
        B.run_cell(cell, list(TASKS), _args(), tmp_path, COMMIT)
    assert (run_dir / "summary.json").exists()  # the demo wrote its report all the same
    assert B.state(run_dir) == "unfinished" and (run_dir / UNFINISHED).exists()
    assert B.measured(cell, list(TASKS), tmp_path, "") is None
    B.run_cell(cell, list(TASKS), _args(), tmp_path, COMMIT)
    assert len(ran) == 1 and "new --tag" in capsys.readouterr().out


def test_a_folder_of_the_older_runner_counts_by_its_summary_and_its_notes(tmp_path):
    """Cells run before the marker existed: a summary and no stop note is finished; a summary that
    says the demo was stopped, or no summary, is not."""
    ok, stopped, empty = (tmp_path / n for n in ("ok", "stopped", "empty"))
    for d in (ok, stopped, empty):
        d.mkdir()
    (ok / "summary.json").write_text(json.dumps({"notes": ["exploration floor 0.5"]}))
    (stopped / "summary.json").write_text(json.dumps({"notes": ["stopped by Ctrl-C"]}))
    assert [B.state(d) for d in (ok, stopped, empty)] == ["finished", "unfinished", "unfinished"]
    assert marked.why_unfinished(stopped) == "stopped by Ctrl-C" and marked.why_unfinished(empty) == "no summary.json"
    assert B.state(tmp_path / "never") == "not run"


def test_a_demo_that_refused_its_options_stops_the_benchmark(tmp_path, monkeypatch):
    monkeypatch.setenv("FLYWHEEL_TOPIC_PREFIX", "unchanged.")
    monkeypatch.setattr(marked, "run_child", lambda argv, cwd: 2)  # exits at once: no report, no logs
    with pytest.raises(B.CellFailed, match="before it started"):
        B.run_cell(Cell(0, 2), list(TASKS), _args(), tmp_path, COMMIT)
    assert "exited with code 2" in (tmp_path / "runs" / Cell(0, 2).name() / UNFINISHED).read_text()


def test_a_failed_recording_stops_the_benchmark_and_says_why(tmp_path, monkeypatch):
    def fail(cell, tasks, args, run_dir):
        raise SystemExit("the recorder failed: no browser")

    monkeypatch.setattr(B, "record_cell", fail)
    with pytest.raises(B.CellFailed, match="no browser"):
        B.run_cell(Cell(3, 0), list(TASKS), _args(), tmp_path, COMMIT)
    assert "the recording failed" in (tmp_path / "runs" / Cell(3, 0).name() / UNFINISHED).read_text()
