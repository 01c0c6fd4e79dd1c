"""The figure of docs/verifier.md's RL comparison (app.ablation.verifier_figure draws it):

    python -m benchmarks.verifier_rl_figure --page st-floor-s0,st-floor-s1 --verifier st-ver-s0,st-ver-s1 \
        --out docs/verifier-rl/by_task.png
"""

from __future__ import annotations

from app.ablation.verifier_figure import main

if __name__ == "__main__":
    main()
