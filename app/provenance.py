"""Which code a measurement ran: the checkout's commit, recorded beside the results, and a refusal
to measure uncommitted changes unless asked. A benchmark or an ablation runs for up to hours and
reads its code as it goes; a figure is only reproducible from the commit it names, and a tracked
file edited but not committed would be measured under a commit it is not part of."""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

COMMIT_FILE = "commit.json"


def add_allow_dirty(ap: argparse.ArgumentParser) -> None:
    """The flag that lets a run measure a checkout with uncommitted changes (then listed in its record)."""
    ap.add_argument("--allow-dirty", action="store_true",
                    help="run even though tracked files have uncommitted changes (the record of the run lists them)")


def _git(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=60)


def checkout_state(root: Path) -> dict:
    """{"commit": HEAD's id (None outside a git checkout or before its first commit), "dirty": the
    tracked files with uncommitted changes, staged or not}. Untracked files are not code that ran."""
    head = _git(root, "rev-parse", "HEAD")
    if head.returncode != 0:
        return {"commit": None, "dirty": []}
    status = _git(root, "status", "--porcelain", "--untracked-files=no")
    dirty = [line[3:] for line in status.stdout.splitlines() if line.strip()]
    return {"commit": head.stdout.strip(), "dirty": dirty}


def commit_to_run(root: Path, allow_dirty: bool) -> dict:
    """``checkout_state``, or SystemExit naming the changed files when there are some and
    ``allow_dirty`` is not set."""
    state = checkout_state(root)
    if state["dirty"] and not allow_dirty:
        shown = ", ".join(state["dirty"][:10]) + (f" and {len(state['dirty']) - 10} more" if len(state["dirty"]) > 10 else "")
        raise SystemExit(f"uncommitted changes to tracked files ({shown}): commit them so the results name the code "
                         "they measured, or pass --allow-dirty")
    return state


def record(out_dir: Path, state: dict) -> Path:
    """Write ``state`` to ``<out_dir>/commit.json``; -> its path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / COMMIT_FILE
    path.write_text(json.dumps(state, indent=1) + "\n")
    return path
