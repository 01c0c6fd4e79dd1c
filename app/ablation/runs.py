"""Ablations of the main job in one command: the same suite and budget per configuration and seed.

Each run is a whole `flywheel demo` (cold start -> SFT -> value pretraining -> PPO unless the
configuration removes a phase), one after the other (one heavy job at a time on a small machine),
all on one broker and one ClickHouse, told apart by their policy names. Every number of the report
is computed in ClickHouse by the query printed under it.

    python -m benchmarks.ablate --minutes 30 --seeds 0,1,2                     # the full table
    python -m benchmarks.ablate --minutes 6 --seeds 0 --configs full,no-cold-start
    python -m benchmarks.ablate --report-only --out docs/ablations             # re-read finished runs
    python -m benchmarks.ablate --seeds 2 --keep docs/ablations/results.json   # add a seed to a table
    python -m benchmarks.ablate --tasks starter --demo-args "--cold-start-demos 0" \
        --configs full,coupled-gae,value-pretrain --tag st                     # from random weights

Ctrl-C or SIGTERM stops the benchmark: the running demo stops as it does on its own (its
processes stopped, its report written; a further Ctrl-C only says so, `app/ablation/clean_stop.py`),
no further run starts, the broker it started stops, and the runs that finished are measured; the
cut-short run keeps its mark (`runs/<run>/unfinished.txt`, as does a run whose demo failed) and is
left out of the table. To end after the running demo instead, create `stop-after-run` in the
output folder (the benchmark prints the command at its start): no further run starts, the broker
stops and the finished runs are measured; the file is removed on the way out.

Configurations (CONFIGS), on today's recipe (the demo's defaults: curriculum, RFT rounds every 4
PPO updates; on the games DAgger's rounds instead, so no-rft is left out there): the full
recipe; no value pretraining; coupled GAE (lambda_policy = lambda_critic = 0.95); no
length-adaptive lambda (lambda_policy fixed at 0.95, lambda_critic 1); no cold start (random
weights); value pretraining where the demo would skip it (a run from random weights);
synchronous rollout and training; no RFT rounds; no curriculum (every task the same share of the
RL episodes).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

from app.demo_config import RUN_ID
from app.demo_queries import q, trainer_metrics
from app.provenance import add_allow_dirty, commit_to_run, record
from app.measures import (PPO_START_BATCHES, by_update, by_update_sql, last_at_update, last_sql, phase_sql, run_gains,
                          value_pretraining_summary)
from app.ablation.clean_stop import stoppable_runs
from app.ablation.marked import RECIPE_FILE, UNFINISHED, run_marked, why_unfinished
from app.ablation.effects import effects_table
from app.ablation.plot import curve_key, plot, plot_by_task
from producers.games import GAMES
from producers.suites import auto_rft, expand, setting
from streams.score import SCORING_VERSION
from trainer.policies.pixel.config import ARROW_VISION

ROOT = Path(__file__).resolve().parents[2]  # the checkout: the runs' working folder, var/ by default

CONFIGS: dict[str, list[str]] = {
    "full": [],
    "no-value-pretrain": ["--value-pretrain-batches", "0"],
    "coupled-gae": ["--trainer-args", "--lam-policy 0.95 --lam-critic 0.95"],
    "fixed-lambda": ["--trainer-args", "--lam-policy 0.95"],
    "no-cold-start": ["--cold-start-demos", "0", "--value-pretrain-batches", "20"],  # only the cold start differs (the demo skips value pretraining from random weights by default)
    "sync": ["--sync", "--value-pretrain-batches", "0"],  # the demo turns it off under --sync anyway
    "no-rft": ["--rft-every", "0"],
    "no-curriculum": ["--no-curriculum"],
    # from random weights the demo skips value pretraining, so there "full" has none and this
    # adds it (the starter suite: --demo-args "--cold-start-demos 0"); after a cold start it is
    # "full" again, so the default --configs leaves it out
    "value-pretrain": ["--value-pretrain-batches", "20"],
}
DEFAULT_CONFIGS = [c for c in CONFIGS if c != "value-pretrain"]
# every arm runs without the exploration floor (the demo's --explore, on by default from random
# weights on MiniWoB++ tasks): otherwise no-cold-start and, from random weights, no-curriculum would
# differ from "full" in the floor too, and the tables recorded before it would mix recipes;
# --demo-args "--explore 0.5" (after these) puts it in every arm
NO_FLOOR = ("--explore", "0")
# the recipe "full" stands for; a table keeps no run measured on another (the first table's runs
# had no curriculum and no RFT rounds: docs/performance.md keeps it beside the new one). RFT
# rounds on auto every 8 updates, one pass (504a869), and PPO's epochs 4 after a cold start;
# UNRECORDED's every 4, two passes, 8 epochs before. A table of curriculum+rft8x1 (8 epochs) is
# another recipe too
RECIPE = "curriculum+rft8x1+epochs4"
UNRECORDED = "curriculum+rft4"  # the recipe of a run from before runs recorded theirs (recipe.txt)


def command_line(module: str, given: list[str], flags: tuple[str, ...] = ("--report-only", "--dry-run")) -> str:
    """The command a benchmark's report says it was run with: ``module`` and every option as
    ``given`` (a report that named a few options could not be reproduced from), less ``flags``
    that only re-read or print (--report-only, --dry-run)."""
    return " ".join(["python -m", module, *(shlex.quote(a) for a in given if a not in flags)])


def recipe(tasks: str) -> str:
    """The recipe "full" stands for on ``tasks`` (as --tasks): RECIPE and, where a game is among
    them, the demonstrations' noise, the scoring version, RFT's and DAgger's rounds and DAgger's
    labels' weight (none: RL teacher-free, issue 56), its buffer shared among the games, the last key in the pixel policy's
    history and the width of its heads' hidden layer, each of which changed what a games run
    learns (a games table keeps no run measured before any). The settings named are the suite's
    defaults (--demo-args may change them; they are compared on their own, and the string still
    names the suite's: `--demo-args "--dagger-every 2"` runs DAgger's rounds under a name saying
    dagger0)."""
    names = expand([t.strip() for t in tasks.split(",") if t.strip()])  # as the demo reads --tasks
    if not any(t in GAMES for t in names):
        return RECIPE
    rounds = setting(names, 'dagger_every')
    vision = ("+lastkey" if ARROW_VISION.get("last_key") else "") + "+sharedlabels" + \
        (f"+hidden{ARROW_VISION['head_hidden']}" if ARROW_VISION.get("head_hidden") else "")
    dagger = f"+dagger{rounds:g}+expert{setting(names, 'expert_coef'):g}{vision}"
    # no RFT rounds on auto where DAgger's run or the suite keeps them out (app.run_config.kind_rft_every)
    base = "curriculum+rft0" if rounds or not auto_rft(names) else RECIPE
    return f"{base}+noise{setting(names, 'demo_noise'):g}+scoring{SCORING_VERSION}{dagger}"


def default_configs(tasks: str) -> list[str]:
    """The configurations run unless --configs names some: DEFAULT_CONFIGS, less no-rft where the
    recipe has no RFT rounds to remove (the games: their RL is teacher-free by default)."""
    return [c for c in DEFAULT_CONFIGS if not (c == "no-rft" and "+rft0+" in recipe(tasks))]


def options(config: str) -> list[str]:
    """The demo options of a configuration."""
    return list(CONFIGS[config])


WINDOW = 100  # episodes per point of the curves (all tasks together: they are interleaved)
TASK_WINDOW = 10  # episodes per point of the per-task curves (a game has 50-150 in a 30-minute run)


def run_of(config: str, seed: int, tag: str = "") -> str:
    """The demo's run id (a run id used before in the data dir is refused by the demo)."""
    return f"abl{'-' + tag if tag else ''}-{config}-s{seed}"


def policy_of(config: str, seed: int, tag: str = "") -> str:
    return f"pixel-{run_of(config, seed, tag)}"


# what a run is measured by: success, or on the games (issue 31) the normalised score (0 = the random
# policy's mean, 1 = the scripted heuristic's); the curve's column of each is named after it
MEASURES = {"success": "toFloat64(success)", "normalised_score": "normalised_score"}


def default_measure(tasks: str) -> str:
    """normalised_score when every task is a game (``games`` or ``games.<name>``), else success."""
    return "normalised_score" if all(t == "games" or t.startswith("games.") for t in tasks.split(",")) else "success"


def run_start_sql(policy: str) -> str:
    """The run's first episode's start, in seconds (its first demonstration after a cold start)."""
    return f"""(SELECT toUnixTimestamp64Milli(min(started_at)) / 1000 FROM trajectories FINAL
                    WHERE policy IN ('{policy}', 'scripted-{policy}'))"""


def curve_sql(policy: str, measure: str = "success") -> str:
    """The measure's mean per window of WINDOW ended episodes of the run (RL only: the annotator's
    demonstrations are under another policy name), with the episodes and seconds at its end."""
    return f"""SELECT intDiv(k - 1, {WINDOW}) AS window, max(k) AS episodes, round(avg(m), 4) AS {curve_key(measure)},
    round(max(t) - {run_start_sql(policy)}, 1) AS seconds
FROM (SELECT {MEASURES[measure]} AS m, toUnixTimestamp64Milli(ended_at) / 1000 AS t,
             row_number() OVER (ORDER BY ended_at, episode_id) AS k
      FROM trajectories FINAL WHERE policy = '{policy}' AND status = 'ended')
GROUP BY window HAVING count() = {WINDOW} ORDER BY window"""


def task_curve_sql(policy: str, measure: str = "success") -> str:
    """The measure's mean per window of TASK_WINDOW ended episodes of each task that have the
    measure (the starting policy's and PPO's, as curve_sql), with the seconds since the run's
    first episode (its first demonstration after a cold start) at the window's end."""
    return f"""SELECT task, intDiv(k - 1, {TASK_WINDOW}) AS window, max(k) AS episodes, round(avg(m), 4) AS {curve_key(measure)},
    round(max(t) - {run_start_sql(policy)}, 1) AS seconds
FROM (SELECT task_name AS task, {MEASURES[measure]} AS m, toUnixTimestamp64Milli(ended_at) / 1000 AS t,
             row_number() OVER (PARTITION BY task_name ORDER BY ended_at, episode_id) AS k
      FROM trajectories FINAL WHERE policy = '{policy}' AND status = 'ended' AND {MEASURES[measure]} IS NOT NULL)
GROUP BY task, window HAVING count() = {TASK_WINDOW} ORDER BY task, window"""


def entropy_sql(policy: str) -> str:
    return f"""SELECT round(avg(metrics['losses/entropy']), 4) AS entropy_last_5
FROM (SELECT metrics FROM trainer_metrics FINAL WHERE policy = '{policy}' ORDER BY update DESC LIMIT 5)"""


def sql(statement: str) -> list[dict]:
    out = subprocess.run([sys.executable, "-m", "app.cli", "sql", "--format", "json", statement],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        raise RuntimeError(out.stderr.strip()[-500:])
    data = json.loads(out.stdout)
    return data if isinstance(data, list) else data.get("rows", data.get("data", []))


STOP_AFTER = "stop-after-run"  # created in --out by someone: no further run starts


def runs_in_order(seeds: list[int], configs: list[str], out: Path) -> Iterator[tuple[int, str]]:
    """(seed, configuration) seed-major (a cut-short invocation still has every configuration
    once), until ``out / STOP_AFTER`` exists: then no further run starts, and the file is removed
    (main also removes one left at its start or made during the last run)."""
    for seed in seeds:
        for config in configs:
            if (out / STOP_AFTER).exists():
                (out / STOP_AFTER).unlink()
                print(f"{out / STOP_AFTER} found (and removed): no further run", flush=True)
                return
            yield seed, config


def recipe_of(report_dir: Path) -> str:
    """The recipe the run in ``report_dir`` ran on: its recipe.txt, else UNRECORDED (a run from
    before runs recorded it: no games recipe then named its noise or scoring version)."""
    path = report_dir / RECIPE_FILE
    return path.read_text().strip() if path.exists() else UNRECORDED


def run_one(config: str, seed: int, args, out: Path) -> Path:
    run_id = run_of(config, seed, args.tag)
    report_dir = out / "runs" / run_id
    if (report_dir / UNFINISHED).exists() and (report_dir / "logs").exists():
        print(f"== {run_id}: {why_unfinished(report_dir)}; not measured "
              "(a data dir takes a run id once: run it again under a new --tag)")
        return report_dir
    # a demo that refused its options started nothing (no logs folder yet): its run id is unspent, run it
    if (report_dir / "summary.json").exists():  # a finished run is kept: rerunning resumes the table
        print(f"== {run_id}: finished before, kept (delete {report_dir} to run it again in a fresh data dir)")
        return report_dir
    argv = [sys.executable, "-m", "app.cli", "demo", "--run-id", run_id, "--minutes", str(args.minutes),
            "--seed", str(seed), "--tasks", args.tasks, "--report-dir", str(report_dir), "--keep-broker",
            "--progress-s", "30", *NO_FLOOR, *options(config), *args.demo_args.split()]
    print(f"== {run_id}: {' '.join(argv[3:])}", flush=True)
    report_dir.mkdir(parents=True, exist_ok=True)
    (report_dir / RECIPE_FILE).write_text(recipe(args.tasks) + "\n")
    t0 = time.time()
    try:
        rc = run_marked(argv, ROOT, report_dir, args.minutes)
    except KeyboardInterrupt:
        print(f"== {run_id}: stopped after {(time.time() - t0) / 60:.1f} min; not measured, no further run", flush=True)
        raise
    print(f"== {run_id}: exit {rc} after {(time.time() - t0) / 60:.1f} min", flush=True)
    return report_dir


def finished(config: str, seed: int, out: Path, tag: str) -> bool:
    """A run to measure: its demo ended on its own (not stopped, not failed) and wrote its summary
    (say why not)."""
    why = why_unfinished(out / "runs" / run_of(config, seed, tag))
    if why:
        print(f"{config} seed {seed}: {why}, not measured ({out / 'runs'})", file=sys.stderr)
    return why is None


def measure(config: str, seed: int, out: Path, target: float, tag: str = "", measured: str = "success") -> dict:
    p = policy_of(config, seed, tag)
    summary_path = out / "runs" / run_of(config, seed, tag) / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    curve, key = sql(curve_sql(p, measured)), curve_key(measured)
    reached = next((r for r in curve if r[key] >= target), None)
    try:  # from ClickHouse: runs from before the pooled critic check are measured alike
        vp = value_pretraining_summary([tuple(r.values()) for r in sql(trainer_metrics(p))])
    except RuntimeError as exc:  # the run's summary has the first batch's figures
        print(f"{config} seed {seed}: the critic check from the run's summary only: {exc}", file=sys.stderr)
        vp = summary.get("value_pretraining", {})
    ent = sql(entropy_sql(p))
    after = summary.get("after", {})
    try:
        by_task = task_curves(sql(task_curve_sql(p, measured)))
    except RuntimeError as exc:  # the figure's query alone: the run's table row stands without it
        print(f"{config} seed {seed}: no per-task curves: {exc}", file=sys.stderr)
        by_task = None
    return {"config": config, "seed": seed, "policy": p, **updates_of(p, summary),
            "curve": curve, "task_curves": by_task, "task_window": TASK_WINDOW,
            "episodes": curve[-1]["episodes"] if curve else 0,
            "final_success": curve[-1][key] if curve else None,  # of the measure: success or normalised score
            # the report's "after": each task's last 100 ended episodes, pi_sft's among them where PPO had fewer
            "mean_task_success_last_100": statistics.mean(after.values()) if after else None,
            "seconds_to_target": reached["seconds"] if reached else None,
            "episodes_to_target": reached["episodes"] if reached else None,
            "ev_at_ppo_start": vp.get("explained_variance_at_ppo_start"),
            "corr_at_ppo_start": vp.get("value_return_corr_at_ppo_start"),
            "episodes_at_ppo_start": vp.get("episodes_at_ppo_start"),
            # pooled over PPO's first batches: a game's first batch may hold 2 episodes (a correlation of +-1)
            "ev_ppo_start_pooled": vp.get("explained_variance_ppo_start_pooled"),
            "corr_ppo_start_pooled": vp.get("value_return_corr_ppo_start_pooled"),
            "ppo_start_episodes": vp.get("ppo_start_episodes"),
            # the same pooled over every PPO update: the critic while it steered the policy
            "ev_ppo_phase": vp.get("explained_variance_ppo_phase"),
            "corr_ppo_phase": vp.get("value_return_corr_ppo_phase"),
            # the mean over tasks of PPO's episodes' success less pi_sft's (app.measures.phase_gain)
            "ppo_gain": (summary.get("ppo_gain") or {}).get("gain"),
            "ppo_gain_se": (summary.get("ppo_gain") or {}).get("standard_error"),
            # the same over each task's last 100 PPO episodes: the issues' "last 100" read at the run's end
            **{"ppo_gain_last_100": None, "ppo_gain_last_100_se": None, **rl_last(p, summary)},
            "entropy_last": ent[0]["entropy_last_5"] if ent else None}


def updates_of(policy: str, summary: dict) -> dict:
    """The run's PPO episodes per task and update (``by_update_sql``), and the last update that
    played one: what the report reads the runs at, at equal updates. Empty where the run has no
    starting version or no PPO episode."""
    base = base_version_of(policy, summary)
    if base is None:
        return {}
    buckets = by_update([tuple(r.values()) for r in sql(by_update_sql(policy, base, summary.get("dpo_version")))])
    if not buckets:
        return {}
    return {"by_update": buckets, "updates": max(u for rows in buckets.values() for u, _, _ in rows)}


def at_equal_updates(results: list[dict]) -> int | None:
    """Each row's mean last-100 per task at the fewest updates any row reached (set on the rows
    as ``mean_last_100_at_update``), and that update; None (nothing set) where no row has them.
    A row without them (measured before they were) gets None."""
    reached = [r["updates"] for r in results if r.get("by_update")]
    if not reached:
        return None
    common = min(reached)
    for r in results:
        r["mean_last_100_at_update"] = last_at_update(r["by_update"], common) if r.get("by_update") else None
    return common


def backfill_updates(results: list[dict]) -> None:
    """Rows kept from an earlier invocation measured before the per-update figures and the RL
    phase's own last 100 existed: read them from ClickHouse where the row records its run's policy
    and that policy is found there; nothing is guessed (another run may have the name a guess
    would give), and a figure the row has is not overwritten. Say which rows could not be read."""
    for r in results:
        if "by_update" in r:
            continue
        policy = r.get("policy")
        try:
            got = {**updates_of(policy, {}), **rl_last(policy, {})} if policy else {}
        except (RuntimeError, ValueError) as exc:
            print(f"{r['config']} seed {r['seed']}: no per-update figures ({policy}): {exc}", file=sys.stderr)
            got = {}
        r.update({k: v for k, v in got.items() if r.get(k) is None})
        if "by_update" not in r:
            print(f"{r['config']} seed {r['seed']}: " + (f"no PPO episode of {policy} in ClickHouse" if policy else
                  "kept without its policy's name") + ": not read at equal updates", file=sys.stderr)


def task_curves(rows: list[dict]) -> dict[str, list[dict]]:
    """task_curve_sql's rows as one curve per task, in its order."""
    curves: dict[str, list[dict]] = {}
    for r in rows:
        curves.setdefault(r["task"], []).append({k: v for k, v in r.items() if k != "task"})
    return curves


def base_version_of(policy: str, summary: dict) -> int | None:
    """The version the run's trainer started from (pi_sft's, or the random init's): the summary's
    since it records it, else the policy's first published version (ClickHouse), which is the one
    the trainer of a fresh run id starts from."""
    if summary.get("base_version") is not None:
        return int(summary["base_version"])
    rows = sql(f"SELECT min(version) AS v, count() AS n FROM policy_versions FINAL WHERE policy = {q(policy)}")
    return int(rows[0]["v"]) if rows and rows[0]["n"] else None


def rl_last(policy: str, summary: dict) -> dict:
    """From ClickHouse, over each task's last 100 PPO episodes (all of them where it had fewer: the
    issues' measure, ``measures.last_sql``): the mean over tasks, and PPO's gain there over the
    starting policy's episodes (``measures.run_gains``) with its standard error; so runs from before
    the report gave them are measured alike. Empty without a starting version; None where a
    phase is missing."""
    base = base_version_of(policy, summary)
    if base is None:
        return {}
    rows = [tuple(r.values()) for r in sql(phase_sql(policy, base, True, False, summary.get("dpo_version")))]
    last = [tuple(r.values()) for r in sql(last_sql(policy, base, summary.get("dpo_version")))]
    gain = run_gains(rows, last)[1]
    return {"mean_rl_last_100": statistics.mean(float(r[3]) for r in last) if last else None,
            "ppo_gain_last_100": gain[0] if gain else None, "ppo_gain_last_100_se": gain[1] if gain else None}


def spread(values: list) -> str:
    xs = [v for v in values if v is not None]
    if not xs:
        return "-"
    if len(xs) == 1:
        return f"{xs[0]:.3g}" + ("" if len(xs) == len(values) else f" ({len(values) - len(xs)} none)")
    s = f"{statistics.mean(xs):.3g} ± {statistics.stdev(xs):.2g}"
    return s + ("" if len(xs) == len(values) else f" ({len(values) - len(xs)} none)")


SETTINGS = ("tasks", "minutes", "target", "demo_args", "measure", "recipe")  # what makes two runs comparable


def merge_kept(results: list[dict], kept: list[dict], configs: list[str], settings: dict) -> list[dict]:
    """This invocation's rows, plus the kept rows of ``configs`` for the (configuration, seed)
    pairs it has none of, in the order of CONFIGS then seed; a kept row is marked ``"kept": true``.
    A kept row measured under other ``settings`` (where it records them) is refused: ValueError."""
    have = {(r["config"], r["seed"]) for r in results}
    merged = list(results)
    for r in kept:
        if r["config"] not in configs or (r["config"], r["seed"]) in have:
            continue
        other = {k: r.get(k) for k in SETTINGS if (k in r or k == "recipe") and r.get(k) != settings.get(k)}
        if other:
            raise ValueError(f"kept run {r['config']} seed {r['seed']} was measured with {other}, "
                             f"not {({k: settings[k] for k in other})}")
        merged.append({**r, "kept": True})
    return sorted(merged, key=lambda r: (list(CONFIGS).index(r["config"]), r["seed"]))


def write_report(results: list[dict], out: Path, args) -> Path:
    plot(results, out / "ablations.png", args.measure, WINDOW, list(CONFIGS))
    # runs measured with other windows (kept from an earlier invocation) are not drawn beside these
    per_task = [r for r in results if r.get("task_curves") and r.get("task_window") == TASK_WINDOW]
    by_task = plot_by_task(per_task, out / "ablations_by_task.png", args.measure, TASK_WINDOW, list(CONFIGS))
    common = at_equal_updates(results)
    seeds = ",".join(str(s) for s in sorted({r["seed"] for r in results}))
    kept = sum(bool(r.get("kept")) for r in results)
    lines = [f"# Ablations: {args.tasks}, {args.minutes:g} min per run, seeds {seeds}", "",
             f"Each run is `flywheel demo --tasks {args.tasks} --minutes {args.minutes:g} --seed S` plus its "
             f"configuration's options; one run at a time on this machine. {args.measure.replace('_', ' ').capitalize()} "
             f"is over windows of {WINDOW} ended RL episodes of all tasks together (the final column: the last "
             f"window); the target is {args.target}. Mean ± standard deviation "
             "across seeds." + (f" {kept} of the {len(results)} runs were measured by an earlier invocation "
                                "(`--keep`); their rows are marked `kept` in results.json." if kept else ""), "",
             "The mean last-100 RL episodes per task is the issues' measure at the run's end: each task's last 100 "
             "PPO episodes, all of them where it had fewer, pi_sft's left out (`app.measures.last_sql`). The mean "
             "last-100 ended per task, the only one in tables before it, is the run report's: each task's last 100 "
             "ended episodes, pi_sft's among them where PPO had fewer.", "",
             *([f"The runs are also read at equal PPO updates: each task's last 100 PPO episodes among those acted by "
                f"versions up to update {common}, the fewest any run here reached in its {args.minutes:g} minutes "
                "(`app.measures.last_at_update`), the mean over tasks.", ""] if common is not None else []),
             "The critic's explained variance is against its own targets, the lambda_critic-returns: below 1 "
             "(coupled GAE's 0.95) they lean on the critic's own values, which raises it by itself. The value-return "
             "correlation (each episode's first value against its return) reads every configuration alike.", "",
             f"| configuration | options | seeds | RL episodes (in whole windows) | final {args.measure.replace('_', ' ')} | mean last-100 RL episodes per task | "
             "mean last-100 ended per task | "
             f"mean last-100 per task at update {common if common is not None else '-'} | PPO updates | "
             "PPO's gain over pi_sft | PPO's last 100 over pi_sft | minutes to target | critic EV at PPO start | "
             "value-return corr at PPO start | episodes in PPO's first batch | critic EV, first "
             f"{PPO_START_BATCHES} PPO batches (by steps) | value-return corr, first {PPO_START_BATCHES} PPO batches "
             "(by episodes less two) | episodes in them | critic EV, every PPO update (by steps) | "
             "value-return corr, every PPO update | entropy (last 5 updates) |",
             "|---" * 21 + "|"]
    for config in dict.fromkeys(r["config"] for r in results):
        rs = [r for r in results if r["config"] == config]
        minutes = [r["seconds_to_target"] / 60 if r["seconds_to_target"] is not None else None for r in rs]
        lines.append(f"| {config} | `{' '.join(options(config))}` | {len(rs)} | "
                     f"{spread([r['episodes'] for r in rs])} | {spread([r['final_success'] for r in rs])} | "
                     f"{spread([r.get('mean_rl_last_100') for r in rs])} | {spread([r.get('mean_task_success_last_100') for r in rs])} | "
                     f"{spread([r.get('mean_last_100_at_update') for r in rs])} | {spread([r.get('updates') for r in rs])} | "
                     f"{spread([r.get('ppo_gain') for r in rs])} | {spread([r.get('ppo_gain_last_100') for r in rs])} | "
                     f"{spread(minutes)} | "
                     f"{spread([r['ev_at_ppo_start'] for r in rs])} | {spread([r['corr_at_ppo_start'] for r in rs])} | "
                     f"{spread([r.get('episodes_at_ppo_start') for r in rs])} | {spread([r.get('ev_ppo_start_pooled') for r in rs])} | "
                     f"{spread([r.get('corr_ppo_start_pooled') for r in rs])} | {spread([r.get('ppo_start_episodes') for r in rs])} | "
                     f"{spread([r.get('ev_ppo_phase') for r in rs])} | {spread([r.get('corr_ppo_phase') for r in rs])} | "
                     f"{spread([r['entropy_last'] for r in rs])} |")
    effects = effects_table(results)
    if effects:
        lines += ["", "Each configuration against the full recipe: its mean over seeds less full's, ± the standard "
                  "error of that difference (Welch's, unpaired), marked `> 2 SE` when the difference is above twice "
                  "it, and the values each side had (configuration / full). With 3 seeds a side a difference of "
                  "nothing passes that test about one time in seven; the two gains are read from the same episodes, "
                  "so they are not two pieces of evidence (`app/ablation/effects.py`).", "", *effects]
    lines += ["", "![success against episodes and wall-clock](ablations.png)", ""]
    if by_task:
        left_out = len(results) - len(per_task)
        lines += [f"Per task, windows of {TASK_WINDOW} of its episodes (the starting policy's, then PPO's) against "
                  f"wall-clock, one line for each of {len(per_task)} runs" + (
                      f" ({left_out} measured without them, or with other windows, are not drawn)" if left_out else "")
                  + ":", "", "![per task against wall-clock](ablations_by_task.png)", ""]
    lines += ["Each run's own report (phases, success per task and phase, trainer metrics) is written under "
              "`runs/` of the output folder (`--out`; about 0.8 MB a run, not kept beside a committed table).", "",
              "<details><summary>SQL (for run <code>P</code>)</summary>", "", "```sql",
              curve_sql("P", args.measure), "", task_curve_sql("P", args.measure), "", entropy_sql("P"), "",
              "-- each task's last 100 RL episodes, and its RL episodes by PPO update (0: the run's starting version)",
              last_sql("P", 0), "", by_update_sql("P", 0), "```", "</details>", ""]
    path = out / "README.md"
    path.write_text("\n".join(lines))
    (out / "results.json").write_text(json.dumps(results, indent=2, default=str))
    return path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--configs", default="", help=f"comma-separated, of: {', '.join(CONFIGS)} (default: "
                                                  f"{', '.join(DEFAULT_CONFIGS)}, less no-rft on the games)")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--minutes", type=float, default=30.0, help="wall-clock per run")
    ap.add_argument("--tasks", default="default", help="suite or tasks (as flywheel demo --tasks)")
    ap.add_argument("--target", type=float, default=0.8, help="the measure the 'to target' columns wait for")
    ap.add_argument("--measure", choices=list(MEASURES), default=None,
                    help="success, or normalised_score (the default when every task is a game)")
    ap.add_argument("--demo-args", default="", help="more flywheel demo options for every run")
    ap.add_argument("--out", default=str(ROOT / "var" / "ablations"))
    ap.add_argument("--tag", default="", help="part of every run id and policy name (abl-TAG-CONFIG-sSEED): a data dir "
                                              "refuses a run id used before, so a new budget or setting needs a new tag")
    ap.add_argument("--report-only", action="store_true", help="measure finished runs, run nothing")
    ap.add_argument("--keep", default="", help="results.json of runs measured before (another data dir): their "
                    "rows join the report where this invocation has no run of that configuration and seed")
    add_allow_dirty(ap)
    args = ap.parse_args()
    args.measure = args.measure or default_measure(args.tasks)
    configs = [c for c in args.configs.split(",") if c] or default_configs(args.tasks)
    unknown = [c for c in configs if c not in CONFIGS]
    if unknown:
        ap.error(f"unknown configuration(s) {unknown}; known: {', '.join(CONFIGS)}")
    if "no-rft" in configs and "no-rft" not in default_configs(args.tasks):
        ap.error(f"no-rft is the full recipe on {args.tasks} (DAgger's rounds take RFT's place there): leave it out")
    seeds = [int(s) for s in args.seeds.split(",") if s]
    if not RUN_ID.fullmatch(run_of(max(configs, key=len), max(seeds, default=0), args.tag)):
        ap.error(f"--tag {args.tag!r} would give run ids the demo refuses (letters, digits, '.', '_', '-', at most 100)")
    out = Path(args.out)
    print(f"commit: {record(out, commit_to_run(ROOT, args.allow_dirty))}", flush=True)
    os.environ.setdefault("FLYWHEEL_DATA_DIR", str(ROOT / "var"))
    if not args.report_only:
        stop_file = (out / STOP_AFTER).resolve()
        if stop_file.exists():
            stop_file.unlink()
            print(f"removed {stop_file}, left by an earlier invocation", flush=True)
        print(f"to end after the running demo: touch {stop_file}", flush=True)
        try:
            with stoppable_runs("the runs that finished are measured below"):
                for seed, config in runs_in_order(seeds, configs, out):
                    run_one(config, seed, args, out)
        finally:
            stop_file.unlink(missing_ok=True)  # one made during the last run has had its effect
    results, today = [], recipe(args.tasks)
    for seed in seeds:
        for config in configs:
            if not finished(config, seed, out, args.tag):
                continue
            ran_on = recipe_of(out / "runs" / run_of(config, seed, args.tag))
            if ran_on != today:
                print(f"{config} seed {seed}: ran on recipe {ran_on}, not today's {today}: left out "
                      "(measure it with the checkout it ran on)", file=sys.stderr)
                continue
            try:
                results.append(measure(config, seed, out, args.target, args.tag, args.measure))
            except RuntimeError as exc:
                print(f"{config} seed {seed}: not measured: {exc}", file=sys.stderr)
    settings = {"tasks": args.tasks, "minutes": args.minutes, "target": args.target, "demo_args": args.demo_args,
                "measure": args.measure, "recipe": today}
    for r in results:
        r.update(settings)
    if args.keep:
        try:
            results = merge_kept(results, json.loads(Path(args.keep).read_text()), configs, settings)
        except ValueError as exc:
            ap.error(f"--keep {args.keep}: {exc}")
        backfill_updates(results)
    print(f"report: {write_report(results, out, args)}")
    return 0

