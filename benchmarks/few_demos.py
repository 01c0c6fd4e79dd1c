"""Few demonstrations recorded through the UI, plus RL (issue 59, item 3), in one command
(app.ablation.few_demos_runs runs it, app.few_demos says what one cell is):

    python -m benchmarks.few_demos --minutes 20 --seeds 0,1,2               # the full table
    python -m benchmarks.few_demos --dry-run                                # the commands only
    python -m benchmarks.few_demos --report-only                            # re-read finished runs
"""

from __future__ import annotations

import sys

from app.ablation.few_demos_runs import main

if __name__ == "__main__":
    sys.exit(main())
