"""What a correction is worth against a demonstration (issue 59, item 3): the plan and its table.

Per seed, from one policy V (the final version of the few-demonstrations table's guided N = 3
cell of that seed, ``fewg-n3-sS``, docs/few-demos):

1. **source**: an evaluation run of V (training off, greedy: ``SOURCE_EXTRA``) plays
   ``source_episodes`` of each task; its failed episodes are what the corrector sees.
2. **C, corrections**: the corrector (app.ui.correct, Playwright playing the person in the
   Episodes view) walks each task's failed episodes until ``k`` are corrected: one
   error-correction pair each, at the first wrong step.
3. **D, demonstrations**: the recorder (app.ui.record, Playwright playing the person in the
   Annotate view) records more demonstrations of each task than needed; app.ui.demo_pairs turns
   them, in seed order, into one pair each where V would first leave the person's path, until each
   task has as many pairs as C got for it. Same judge (the routine of a person), same kind of
   pair, same count per task: only where the states come from differs (V's own failures, or the
   person's path).
4. `flywheel dpo` from V on C's pairs, and again from V on D's (same seed and settings).
5. **0, C, D** scored by evaluation runs of V, V+C and V+D on the same task instances (one
   ``--seed``, other than the source's and the demonstrations'): the arms are paired by instance.
   The policy samples its actions there, as in the main job.

Gain of an arm: its mean success over the tasks minus arm 0's; per datum: that over the pairs
per task it trained on. Pure: names, command lines and the table; app.ablation.correction_runs
runs them (``python -m benchmarks.corrections``).
"""

from __future__ import annotations

import re
import statistics

from app.measures import mean_se_text

ARMS = ("0", "c", "d")  # V alone, V + DPO on corrections, V + DPO on demonstrations' pairs
ARM_NAMES = {"0": "V alone", "c": "V + DPO on corrections", "d": "V + DPO on demonstrations"}
SOURCE_SEED = 40  # + seed: the source run's --seed (its task seeds are --seed * 100000 + i)
EVAL_SEED = 50  # + seed: every arm's evaluation run plays the same instances
DEMO_SEED = 7000  # + seed * 100: the recorder's first task seed (the few-demos cells used seed * 1000 + i)
DEMO_MARGIN = 4  # demonstrations recorded beyond k per task: V may follow some of them to the end
KIND = "pixel"
# the source run acts greedily: a correction's rejected side is then V's preferred action at that
# state, as a demonstration pair's is (V's greedy action); a sampled failure is often a click V
# thought unlikely, which DPO barely moves (docs/reflection.md)
SOURCE_EXTRA = ("--rollout-args=--greedy",)


def start_of(seed: int) -> str:
    """V: the guided N = 3 cell's final version, as ``--start-from`` names it."""
    return f"fewg-n3-s{seed}"


def run_id(role: str, seed: int, tag: str = "") -> str:
    """``cor[-TAG]-ROLE-sSEED``; roles: src, eval-0, eval-c, eval-d."""
    return f"cor{'-' + tag if tag else ''}-{role}-s{seed}"


def policy_of(run: str) -> str:
    return f"{KIND}-{run}"


def prefix_of(run: str) -> str:
    """A demo's topics: the source run's hold V, its failures, both arms' pairs and versions."""
    return f"demo-{run}."


def annotator(arm: str, seed: int, tag: str = "") -> str:
    """The person's name in arm ``arm`` (the pairs' annotator is ``human:<name>``)."""
    return run_id(f"person-{arm}", seed, tag)


def correct_argv(python: str, policy: str, tasks: list[str], k: int, look: int, name: str) -> list[str]:
    return [python, "-m", "app.ui.correct", "--policy", policy, "--tasks", ",".join(tasks), "--n", str(look),
            "--corrections", str(k), "--annotator", name]


def record_argv(python: str, tasks: list[str], n: int, name: str, seed: int) -> list[str]:
    return [python, "-m", "app.ui.record", "--tasks", ",".join(tasks), "--n", str(n), "--annotator", name,
            "--first-seed", str(DEMO_SEED + seed * 100)]


def pairs_argv(python: str, policy: str, version: int, name: str, counts: dict[str, int]) -> list[str]:
    return [python, "-m", "app.ui.demo_pairs", "--policy", policy, "--version", str(version), "--demonstrator", name,
            "--counts", ",".join(f"{t}={n}" for t, n in counts.items())]


def dpo_argv(python: str, policy: str, version: int, name: str, seed: int, extra: list[str]) -> list[str]:
    return [python, "-m", "app.cli", "dpo", "--policy-name", policy, "--reference-version", str(version),
            "--kinds", "error_correction", "--annotators", f"human:{name}", "--seed", str(seed), *extra]


PUBLISHED = re.compile(r"published \w+ version (\d+) ")


def published_version(output: str) -> int | None:
    """The version `flywheel dpo` says it published (None: it did not say)."""
    found = PUBLISHED.findall(output)
    return int(found[-1]) if found else None


def corrected_counts(tally: dict[str, dict[str, int]], tasks: list[str]) -> dict[str, int]:
    """Per task, how many episodes the corrector corrected (its JSON's ``by_task``)."""
    return {t: tally.get(t, {}).get("corrected", 0) for t in tasks}


def task_means(rows: list[dict]) -> dict[str, dict]:
    """An evaluation run's per-task rows (task, episodes, mean) keyed by task."""
    return {r["task"]: {"mean": float(r["mean"]), "episodes": int(r["episodes"])} for r in rows}


def seed_row(seed: int, scores: dict[str, dict], pairs: dict[str, dict[str, int]], tasks: list[str]) -> dict:
    """One seed's result: each arm's per-task means, its mean over ``tasks``, and the pairs per arm."""
    arms = {}
    for arm, per_task in scores.items():
        got = [per_task[t]["mean"] for t in tasks if t in per_task]
        arms[arm] = {"tasks": per_task, "mean": statistics.mean(got) if len(got) == len(tasks) else None}
    return {"seed": seed, "arms": arms, "pairs": pairs}


def gain(row: dict, arm: str) -> float | None:
    """The arm's mean over tasks minus arm 0's on the same instances."""
    a, z = row["arms"].get(arm, {}).get("mean"), row["arms"].get("0", {}).get("mean")
    return None if a is None or z is None else a - z


def per_datum(row: dict, arm: str, tasks: list[str]) -> float | None:
    """The gain over the pairs per task the arm trained on (None: no pair or no gain)."""
    g, n = gain(row, arm), sum(row["pairs"].get(arm, {}).get(t, 0) for t in tasks) / len(tasks)
    return None if g is None or not n else g / n


def table(rows: list[dict], tasks: list[str]) -> list[str]:
    """Per arm: each task's success (mean over seeds), the mean over tasks, the pairs per task,
    and the gain over V alone (total and per datum; mean ± standard error over seeds)."""
    lines = [f"| arm | seeds | {' | '.join(tasks)} | mean over tasks | pairs per task | gain over V | gain per pair per task |",
             "|---" * (len(tasks) + 6) + "|"]
    for arm in ARMS:
        have = [r for r in rows if r["arms"].get(arm, {}).get("mean") is not None]
        if not have:
            continue
        per_task = [_plain([r["arms"][arm]["tasks"].get(t, {}).get("mean") for r in have]) for t in tasks]
        pairs = [sum(r["pairs"].get(arm, {}).get(t, 0) for t in tasks) / len(tasks) for r in have]
        lines.append(f"| {ARM_NAMES[arm]} | {len(have)} | {' | '.join(per_task)} | "
                     f"{_plain([r['arms'][arm]['mean'] for r in have])} | "
                     f"{f'{statistics.mean(pairs):.1f}' if arm != '0' else '-'} | "
                     f"{mean_se_text([gain(r, arm) for r in have]) if arm != '0' else '-'} | "
                     f"{mean_se_text([per_datum(r, arm, tasks) for r in have]) if arm != '0' else '-'} |")
    return lines


def _plain(xs: list) -> str:
    xs = [x for x in xs if x is not None]
    return f"{statistics.mean(xs):.3f}" if xs else "-"
