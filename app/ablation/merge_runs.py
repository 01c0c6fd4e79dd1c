"""Merging vertical agents (issue 59), in one command: per seed pi_sft on the default suite and the
games together, a MiniWoB++ specialist and a games specialist by RL from it, their merges at each
α with `flywheel merge`, and joint RL from the same pi_sft for the specialists' total time, each
policy scored on both domains by evaluation runs (app.ablation.merge says how).

    python -m benchmarks.merge_curve --seeds 0,1,2 --minutes 30 --eval-episodes 20   # out: var/merging; rerun to resume
    python -m benchmarks.merge_curve --seeds 0 --minutes 1 --eval-episodes 2 --dry-run   # the commands only

Runs go one after the other on one broker (started here unless one answers), told apart by run
id (``mrg[-TAG]-ROLE-sSEED``). A seed takes 3 to 4 hours at --minutes 30, longer than a
session: rerunning the same command resumes it. A run that finished with the same options on
the same recipe (no unfinished marker, its command.json, its recipe.txt) is kept (its report read, its evaluation re-read from
the log), any other (a Ctrl-C, a crash, a cut-off session, a demo stopped by someone else, other
options) runs again from its start under the next attempt's id (``...-r2``: a data dir refuses a
run id used before), and the pool's copies and merges are made
again where the broker no longer holds them (a version a run published is read back from the
log when the broker that held it is gone; the pool has no sink, so it lives on its broker only).
A seed whose step fails is left out and the next seed starts. Ctrl-C stops the running demo
cleanly (app/ablation/clean_stop.py) and writes what was measured.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from app.ablation import merge as M
from app.ablation.clean_stop import run_child, stoppable_runs
from app.ablation.marked import RECIPE_FILE, UNFINISHED, run_marked, why_unfinished
from app.ablation.runs import MEASURES, ROOT, command_line, recipe, sql
from app.phase_list import NO_RL_UPDATE
from app.provenance import add_allow_dirty, commit_to_run, record
from app.start_from import StartFrom, copy_into
from infra.runtime import versions
from infra.runtime.admin import ensure_topics
from infra.runtime.errors import UserError
from infra.runtime.settings import load_settings

KIND = "pixel"
POOL = "pool.json"  # in the pool's folder: what it was built from, written once every merge is published


class StepFailed(RuntimeError):
    """A step of a seed failed: the seed stops, the next one starts."""


def say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


def score_sql(policy: str, measure: str) -> str:
    """Per task of an evaluation run: its ended episodes and their mean ``measure``."""
    m = MEASURES[measure]
    return f"""SELECT task_name AS task, count() AS episodes, round(avg({m}), 4) AS mean
FROM trajectories FINAL WHERE policy = '{policy}' AND status = 'ended' AND {m} IS NOT NULL
GROUP BY task ORDER BY task"""


class Runner:
    """Runs (or, dry, prints) each step of a seed; ``out``: runs/<run id> hold each demo's report."""

    def __init__(self, args, out: Path):
        self.args, self.out, self.dry = args, out, args.dry_run

    def demo(self, role: str, seed: int, tasks: str, minutes: float, extra: list[str], ok=(0,)) -> Path:
        """Run ``role``'s demo, or keep a run of an earlier invocation that finished with this
        command; -> its report folder, named by its run id."""
        runs = self.out / "runs"

        def command(run: str) -> list[str]:
            return M.demo_argv(run, tasks, minutes, seed, runs / run, extra)

        why = {d.name: M.not_kept(d, command(d.name)[3:], recipe(tasks)) for d in runs.iterdir() if d.is_dir()} \
            if runs.is_dir() else {}
        run, finished = M.attempt(M.run_id(role, seed, self.args.tag), {name: w is None for name, w in why.items()})
        for name in M.attempts(M.run_id(role, seed, self.args.tag)):
            if name == run:
                break
            say(f"{name}: not kept: {why[name]}")
        report, argv = runs / run, command(run)
        if finished:
            say(f"{run}: kept (finished before: {' '.join(argv[3:])})")
            return report
        say(f"{run}: {' '.join(argv[3:])}")
        if self.dry:
            return report
        report.mkdir(parents=True, exist_ok=True)
        (report / UNFINISHED).write_text("starting, not run\n")  # before its command: never kept unrun
        (report / M.COMMAND).write_text(json.dumps(argv[3:]))
        (report / RECIPE_FILE).write_text(recipe(tasks) + "\n")
        t0 = time.time()
        rc = run_marked(argv, ROOT, report, minutes, ok)
        say(f"{run}: exit {rc} after {(time.time() - t0) / 60:.1f} min")
        why = why_unfinished(report)
        if why:
            raise StepFailed(f"{run}: {why} (its log: {report / 'logs'})")
        return report

    def outcome(self, report: Path, key: str) -> int:
        """A finished run's version from its outcome.json: base_version (pi_sft's) or published (its last)."""
        if self.dry:
            return {"base_version": 1, "published": 9}[key]
        if not (report / "outcome.json").exists():
            raise StepFailed(f"{report}: no outcome.json (the demo wrote no outcome; its log: {report / 'logs'})")
        value = json.loads((report / "outcome.json").read_text()).get(key)
        if value is None:
            raise StepFailed(f"{report}: no {key} in outcome.json")
        return int(value)

    def pool(self, seed: int, web: str, games: str) -> tuple[str, list[tuple[float, int]]]:
        """Both specialists copied into one policy (the pool run's topics) and merged at each α, or
        an earlier invocation's pool kept where the broker still holds it; -> the pool's run id
        and (α, merged version)."""
        plan = M.pool_plan(web, games, self.args.alphas)
        for run in M.attempts(M.run_id("pool", seed, self.args.tag)):
            folder, policy = self.out / "runs" / run, f"{KIND}-{run}"
            if self.dry:
                return run, self.build_pool(run, policy, plan)
            settings = load_settings({"topic_prefix": f"demo-{run}."})
            ensure_topics(settings)
            held = {pv.version for pv in versions.scan(settings, policy)}
            recorded = json.loads((folder / POOL).read_text()) if (folder / POOL).exists() else None
            state = M.pool_state(recorded, plan, held)
            if state == "kept":
                say(f"{run}: kept (the broker holds its copies and merges)")
                return run, M.pool_versions(plan["alphas"])
            if state == "build":
                folder.mkdir(parents=True, exist_ok=True)
                (folder / POOL).unlink(missing_ok=True)
                merged = self.build_pool(run, policy, plan, settings)
                (folder / POOL).write_text(json.dumps(plan))
                return run, merged
        raise AssertionError("attempts() is endless")

    def build_pool(self, run: str, policy: str, plan: dict, settings=None) -> list[tuple[float, int]]:
        say(f"{run}: copy {plan['sources'][0]} as v1 and {plan['sources'][1]} as v2 of {policy}")
        if not self.dry:
            for version, src in ((1, plan["sources"][0]), (2, plan["sources"][1])):
                name, _, v = src.partition("@")
                copy_into(settings, StartFrom(name, int(v)), KIND, policy, version)
        merged = M.pool_versions(plan["alphas"])
        for alpha, _ in merged:
            argv = M.merge_argv(f"demo-{run}.", policy, (1, 2), alpha)
            say(f"{run}: {argv[1]} {' '.join(argv[5:])}")
            if not self.dry and run_child(argv, ROOT) != 0:
                raise StepFailed(f"flywheel merge at α {alpha:g} failed")
        return merged

    def score(self, seed: int, label: str, start: str) -> dict[str, dict]:
        """``start`` (RUN@VERSION) scored on each domain by an evaluation run."""
        scores = {}
        for domain, (suite, measure) in M.DOMAINS.items():
            role = M.eval_role(label, domain)
            report = self.demo(role, seed, suite, self.args.eval_minutes, M.eval_extra(start, self.args.eval_episodes),
                               ok=(0, NO_RL_UPDATE))  # no update is what an evaluation run is for
            if not self.dry:
                why = M.untrained(json.loads((report / "outcome.json").read_text()))
                if why:
                    raise StepFailed(f"{report.name}: {why}")
                scores[domain] = {"measure": measure, **M.domain_score(sql(score_sql(f"{KIND}-{report.name}", measure)))}
        return scores


def one_seed(r: Runner, seed: int) -> list[dict]:
    a = r.args
    sft = r.demo("sft", seed, M.SFT_TASKS, a.sft_minutes, M.sft_extra(a.demo_args, a.sft_demos))
    pi_sft = f"{sft.name}@{r.outcome(sft, 'base_version')}"
    last = {}
    for role, tasks, minutes in (("web", "default", a.minutes), ("games", "games", a.minutes),
                                 ("joint", M.SFT_TASKS, 2 * a.minutes)):
        report = r.demo(role, seed, tasks, minutes, M.rl_extra(pi_sft, a.demo_args))
        last[role] = f"{report.name}@{r.outcome(report, 'published')}"
    pool, merged = r.pool(seed, last["web"], last["games"])
    rows = [M.row(seed, "pi_sft", None, r.score(seed, "pi_sft", pi_sft))]
    rows += [M.row(seed, f"merge α={alpha:g}", alpha, r.score(seed, M.label_of(alpha), f"{pool}@{v}"))
             for alpha, v in merged]
    rows.append(M.row(seed, "joint", None, r.score(seed, "joint", last["joint"])))
    return rows


def write_report(results: list[dict], out: Path, args) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=2))
    M.plot(results, out / "merge_curve.png")
    seeds = ",".join(str(s) for s in sorted({r["seed"] for r in results}))
    lines = [f"# Merging specialists: {args.minutes:g} min each, seeds {seeds}", "",
             f"pi_sft cloned on `{M.SFT_TASKS}`; a MiniWoB++ specialist (`default`) and a games specialist "
             f"(`games`) by RL from it for {args.minutes:g} min each; θ = (1 − α) θ_web + α θ_games by `flywheel "
             f"merge`; joint RL on both from the same pi_sft for {2 * args.minutes:g} min. Each policy scored on "
             f"{args.eval_episodes} episodes of every task with training off; mean over tasks (± sd across seeds).",
             "", *M.table(results), "",
             "Each specialist against its seed's pi_sft on its own domain (the goal asks more than 2 SE; where it "
             "is not above pi_sft, the merges' shares of it say nothing about merging):", "",
             *M.specialist_gains(results), "", "![the α curve](merge_curve.png)", "",
             f"Command: `{command_line('benchmarks.merge_curve', args.given)}`", "",
             "<details><summary>SQL (evaluation run P, measure m)</summary>", "", "```sql",
             score_sql("P", "success"), "```", "</details>", ""]
    path = out / "README.md"
    path.write_text("\n".join(lines))
    return path


def parse(argv: list[str] | None = None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--minutes", type=float, default=30.0, help="RL minutes per specialist (joint RL: twice)")
    ap.add_argument("--sft-minutes", type=float, default=25.0,
                    help="pi_sft's run (cold start, SFT; it ends at PPO's first version). At 15 the cold start "
                         "(about 5 min for both suites) left `flywheel bc` under 4 min and it was cut")
    ap.add_argument("--sft-demos", type=int, default=-1,
                    help="demonstrations per task cloned into pi_sft (-1: the demo's 20); fewer clone faster")
    ap.add_argument("--eval-episodes", type=int, default=20, help="evaluation episodes of every task")
    ap.add_argument("--eval-minutes", type=float, default=8.0, help="wall-clock of each evaluation run at most "
                                                                    "(long enough for its episodes: the run ends once "
                                                                    "they are played, --until-episodes)")
    ap.add_argument("--alphas", default=",".join(f"{a:g}" for a in M.ALPHAS), help="the games specialist's weights")
    ap.add_argument("--demo-args", default="", help="more flywheel demo options for pi_sft's and the RL runs")
    ap.add_argument("--tag", default="", help="part of every run id (a data dir refuses a run id used before)")
    ap.add_argument("--out", default=str(ROOT / "var" / "merging"))
    ap.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    add_allow_dirty(ap)
    args = ap.parse_args(argv)
    args.given = list(sys.argv[1:] if argv is None else argv)  # as typed: the report's command line
    try:
        args.alphas = M.alphas(args.alphas)
    except ValueError as exc:
        ap.error(str(exc))
    if args.minutes <= 0 or args.eval_episodes < 1:
        ap.error("--minutes must be > 0 and --eval-episodes >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    out = Path(args.out)
    seeds = [int(s) for s in args.seeds.split(",") if s]
    runner = Runner(args, out)
    if args.dry_run:
        say("dry run: the versions after '@' are placeholders (a run's are read from its outcome.json)")
        for seed in seeds:
            one_seed(runner, seed)
        return 0
    print(f"commit: {record(out, commit_to_run(ROOT, args.allow_dirty))}", flush=True)
    os.environ.setdefault("FLYWHEEL_DATA_DIR", str(ROOT / "var"))
    results: list[dict] = []
    with stoppable_runs("what was measured is written"):
        for seed in seeds:
            try:
                results += one_seed(runner, seed)
            except (StepFailed, UserError) as exc:  # UserError: a copy or a read the platform refused
                print(f"seed {seed} left out: {exc}", file=sys.stderr)
    print(f"report: {write_report(results, out, args)}")
    return 0
