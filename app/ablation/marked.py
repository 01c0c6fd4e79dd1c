"""A benchmark's demo run under its unfinished marker: the one place that runs a demo so a cut-off
run is never measured, and the one judge of whether a run ended on its own.

The marker (``unfinished.txt`` in the run's report folder) is written before the demo starts and
removed only when the demo exits with an accepted code and was not stopped by someone else (a demo
writes its report and exits 0 on a SIGTERM, its summary's notes then say "stopped by ..."). A run
cut off anywhere (the benchmark killed, the session ended, the demo crashed) keeps it, with why.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from app.ablation.clean_stop import run_child

UNFINISHED = "unfinished.txt"
RECIPE_FILE = "recipe.txt"  # in a run's report folder: the recipe it ran on (app.ablation.runs.recipe), written before it starts


def stopped_by(report_dir: Path) -> str | None:
    """The note of a demo stopped by someone else than the benchmark running it (it writes its
    report and exits 0 on a SIGTERM: "stopped by SIGTERM ..."), from its summary.json; None where
    it ended on its own or wrote no summary."""
    summary = report_dir / "summary.json"
    notes = json.loads(summary.read_text()).get("notes", []) if summary.exists() else []
    return next((n for n in notes if n.startswith("stopped by")), None)


def why_unfinished(report_dir: Path) -> str | None:
    """None where the run in ``report_dir`` ended on its own and wrote its summary; else why not."""
    if not report_dir.exists():
        return "not run"
    if (report_dir / UNFINISHED).exists():
        return f"did not finish ({(report_dir / UNFINISHED).read_text().strip()})"
    if not (report_dir / "summary.json").exists():
        return "no summary.json"
    return stopped_by(report_dir)


def run_marked(argv: list[str], cwd: Path, report_dir: Path, minutes: float, ok: tuple[int, ...] = (0,)) -> int:
    """Run the demo ``argv`` under ``report_dir``'s marker; -> its exit code. The marker goes only
    where the code is in ``ok``, the demo wrote its summary and no one else stopped it; else it
    says why (``marked_why``). A KeyboardInterrupt
    (the benchmark stopped) leaves it saying how far the run got, and goes on up."""
    marker = report_dir / UNFINISHED
    report_dir.mkdir(parents=True, exist_ok=True)
    marker.write_text(f"started {time.strftime('%Y-%m-%d %H:%M:%S')}, not ended\n")
    t0 = time.time()
    try:
        rc = run_child(argv, cwd)
    except KeyboardInterrupt:
        marker.write_text(f"stopped after {(time.time() - t0) / 60:.1f} of {minutes:g} min\n")
        raise
    why = marked_why(rc, ok, report_dir)
    if why:
        marker.write_text(f"{why}\n")
    else:
        marker.unlink()
    return rc


def marked_why(rc: int, ok: tuple[int, ...], report_dir: Path) -> str | None:
    """Why a demo that exited with ``rc`` did not end on its own (None: it did). An accepted code
    without a summary.json is not an ended run either: the marker keeps saying so."""
    if rc not in ok:
        return f"the demo exited with code {rc}"
    if not (report_dir / "summary.json").exists():
        return f"the demo exited with code {rc} but wrote no summary.json"
    return stopped_by(report_dir)
