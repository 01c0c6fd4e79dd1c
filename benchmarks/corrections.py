"""What a correction is worth against a demonstration (issue 59, item 3) in one command
(app.ablation.correction_runs runs it, app.ablation.corrections says what each step is):

    python -m benchmarks.corrections --seeds 0,1,2 --k 5     # out: var/corrections; rerun to resume by seed
    python -m benchmarks.corrections --seeds 0 --dry-run     # the commands only
"""

from __future__ import annotations

from app.ablation.correction_runs import main

if __name__ == "__main__":
    raise SystemExit(main())
