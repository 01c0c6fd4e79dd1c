"""Merging vertical agents (issue 59) in one command (app.ablation.merge_runs says how, and
app.ablation.merge what is run and measured):

    python -m benchmarks.merge_curve --seeds 0,1,2 --minutes 30 --eval-episodes 20   # out: var/merging; rerun to resume
    python -m benchmarks.merge_curve --seeds 0 --minutes 1 --eval-episodes 2 --dry-run   # the commands only
"""

from __future__ import annotations

from app.ablation.merge_runs import main

if __name__ == "__main__":
    raise SystemExit(main())
