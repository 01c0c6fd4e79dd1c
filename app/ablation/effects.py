"""Each ablation's effect against the full recipe, with its standard error, for ablate's report.

The issue's test of a mechanism is "a difference above twice its standard error over 3 seeds".
The difference is the configuration's mean over seeds less the full recipe's; its standard error
is Welch's, sqrt(sd_a^2 / n_a + sd_b^2 / n_b), unpaired: the same seed gives the same
demonstrations but not the same run (the broker, the clock and the scheduler differ), so no
pairing by seed is assumed. With 3 seeds a side the test is weak: a difference of nothing passes
it about one time in seven, so a table of 4 ablations x 10 measures shows about six by chance
(fewer independent ones: the three last-100 means and the two gains largely read the same
episodes, and the critic's figures at PPO's first batch are part of its first three's, which
are part of every update's, so each group tends to pass or fail together).

    python -m benchmarks.ablate_effects docs/ablations/m33-15min/results.json   # a table's effects
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path

# the measures compared, as (key in a result row, column title)
MEASURES = (("mean_rl_last_100", "mean last-100 RL episodes per task"),
            # tables measured before the one above: the report's last 100 ended, pi_sft's among them where PPO had fewer
            ("mean_task_success_last_100", "mean last-100 ended per task"),
            ("mean_last_100_at_update", "mean last-100 per task at equal updates"),
            ("ppo_gain", "PPO's gain over pi_sft"),
            ("ppo_gain_last_100", "PPO's last 100 over pi_sft"),
            ("ev_at_ppo_start", "critic EV at PPO start"),
            ("ev_ppo_start_pooled", "critic EV, PPO's first batches"),
            ("corr_ppo_start_pooled", "value-return corr, PPO's first batches"),
            ("ev_ppo_phase", "critic EV, every PPO update"),
            ("corr_ppo_phase", "value-return corr, every PPO update"))
BASE = "full"


def effect(base: list, other: list) -> tuple[float, float, int, int] | None:
    """``other``'s mean less ``base``'s, the standard error of that difference and how many values
    each side had; None when either side has fewer than two values (no spread to measure) or the
    standard error is 0 (constant samples: nothing to compare the difference with). None and NaN
    values are left out."""
    a = [x for x in base if x is not None and math.isfinite(x)]
    b = [x for x in other if x is not None and math.isfinite(x)]
    if len(a) < 2 or len(b) < 2:
        return None
    se = math.sqrt(statistics.variance(a) / len(a) + statistics.variance(b) / len(b))
    if se == 0:
        return None
    return statistics.mean(b) - statistics.mean(a), se, len(a), len(b)


def above(diff: float, se: float) -> bool:
    """The issue's test: the difference is above twice its standard error. With 3 seeds a side
    (2-4 degrees of freedom) a difference of nothing passes it about one time in seven."""
    return abs(diff) > 2 * se


def cell(values: tuple[float, float, int, int] | None) -> str:
    if values is None:
        return "- (fewer than 2 values a side, or no spread)"
    diff, se, n_base, n = values
    return f"{diff:+.3f} ± {se:.3f} ({'> 2 SE' if above(diff, se) else 'within 2 SE'}; n {n}/{n_base})"


def effects_table(results: list[dict]) -> list[str]:
    """Markdown lines: one row per configuration other than the full recipe, one column per
    measure: the configuration less the full recipe ± its standard error, whether the difference
    is above twice that, and the values each side had (configuration / full). Empty when the full
    recipe is not in ``results``."""
    def values(config: str, key: str) -> list:
        return [r.get(key) for r in results if r["config"] == config]

    configs = [c for c in dict.fromkeys(r["config"] for r in results) if c != BASE]
    if BASE not in {r["config"] for r in results} or not configs:
        return []
    lines = ["| configuration less full | runs | " + " | ".join(title for _, title in MEASURES) + " |",
             "|---" * (len(MEASURES) + 2) + "|"]
    for config in configs:
        n = sum(r["config"] == config for r in results)
        lines.append(f"| {config} | {n} | "
                     + " | ".join(cell(effect(values(BASE, k), values(config, k))) for k, _ in MEASURES) + " |")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", type=Path, help="an ablation's results.json (python -m benchmarks.ablate writes it)")
    args = ap.parse_args(argv)
    try:
        results = json.loads(args.results.read_text())
    except (OSError, ValueError) as exc:
        ap.error(f"{args.results}: {exc}")
    if not isinstance(results, list) or not all(isinstance(r, dict) and "config" in r for r in results):
        ap.error(f"{args.results}: not an ablation's results (a list of rows with a 'config')")
    lines = effects_table(results)
    print("\n".join(lines) if lines else f"no effects: {args.results} needs the full recipe and another "
                                            "configuration")
    return 0

