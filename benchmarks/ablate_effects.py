"""Each ablation's effect against the full recipe, with its standard error (app.ablation.effects):

    python -m benchmarks.ablate_effects docs/ablations/m33-15min/results.json
"""

from __future__ import annotations

from app.ablation.effects import main

if __name__ == "__main__":
    raise SystemExit(main())
