"""infra.runtime.procs.Child: a child started with ``nice`` runs, with its own children, at that
much more niceness than its parent (the demo's rollout workers yield the CPU to the trainer)."""

from __future__ import annotations

import os
import sys

from infra.runtime.procs import Child

CODE = "import os, subprocess, sys; print(os.nice(0)); sys.stdout.flush(); subprocess.run([sys.executable, '-c', 'import os; print(os.nice(0))'])"


def test_a_nice_child_and_its_children_yield_the_cpu(tmp_path):
    base = os.nice(0)
    niced = Child("niced", [sys.executable, "-c", CODE], tmp_path / "niced.log", nice=7).start()
    plain = Child("plain", [sys.executable, "-c", CODE], tmp_path / "plain.log").start()
    assert niced.proc.wait(30) == 0 and plain.proc.wait(30) == 0
    assert (tmp_path / "niced.log").read_text().split() == [str(min(base + 7, 19))] * 2
    assert (tmp_path / "plain.log").read_text().split() == [str(base)] * 2
