"""Ablations of the main job in one command (app.ablation.runs says how, and what each
configuration removes):

    python -m benchmarks.ablate --minutes 30 --seeds 0,1,2                     # the full table
    python -m benchmarks.ablate --report-only --out docs/ablations             # re-read finished runs
"""

from __future__ import annotations

from app.ablation.runs import main

if __name__ == "__main__":
    raise SystemExit(main())
