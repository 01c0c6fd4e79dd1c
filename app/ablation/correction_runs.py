"""What a correction is worth against a demonstration (issue 59, item 3; app.ablation.corrections
says what each step is): per seed, an evaluation run of V whose failures the corrector corrects,
demonstrations recorded and paired where V leaves them, DPO from V on each, and three evaluation
runs on the same instances. One heavy job at a time. Writes <out>/results.json and <out>/README.md.

    python -m benchmarks.corrections --seeds 0,1,2 --k 5          # the table
    python -m benchmarks.corrections --dry-run                    # the commands
    python -m benchmarks.corrections --report-only                # the table again from results.json

A seed runs whole or not at all: a finished seed's row is kept in results.json and not run again;
one that failed or was stopped names its step, and runs afresh under a new --tag (a data dir
refuses a run id used before). Every step's output is in <out>/runs/<run id>/.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from app.ablation import corrections as C
from app.ablation import merge as M
from app.ablation.clean_stop import stoppable_runs
from app.ablation.few_demos_runs import record_routed
from app.ablation.marked import why_unfinished, run_marked
from app.ablation.merge_runs import StepFailed, say, score_sql
from app.ablation.runs import ROOT, command_line, sql
from app.few_demos import TASKS
from app.phase_list import NO_RL_UPDATE
from app.provenance import add_allow_dirty, commit_to_run, record
from infra.runtime.errors import UserError


class Seed:
    """One seed's steps; ``dry``: print each command instead of running it."""

    def __init__(self, args, seed: int, out: Path):
        self.a, self.seed, self.dry = args, seed, args.dry_run
        self.src = C.run_id("src", seed, args.tag)
        self.folder = out / "runs"
        self.env = {**os.environ, "FLYWHEEL_TOPIC_PREFIX": C.prefix_of(self.src), "PYTHONPATH": str(ROOT)}

    def demo(self, run: str, seed: int, start: str, episodes: int, extra: tuple[str, ...] = ()) -> Path:
        """An evaluation run of ``start`` (training off) playing ``episodes`` of every task."""
        report = self.folder / run
        argv = M.demo_argv(run, ",".join(self.a.tasks), self.a.eval_minutes, seed, report,
                           [*M.eval_extra(start, episodes), *extra])
        say(f"{run}: {' '.join(argv[3:])}")
        if self.dry:
            return report
        rc = run_marked(argv, ROOT, report, self.a.eval_minutes, ok=(0, NO_RL_UPDATE))
        why = why_unfinished(report) or M.untrained(json.loads((report / "outcome.json").read_text()))
        if why:
            raise StepFailed(f"{run}: exit {rc}: {why} (its log: {report / 'logs'})")
        return report

    def child(self, name: str, argv: list[str]) -> str:
        """A step run on the source run's topics; -> its standard output. StepFailed on a non-zero exit."""
        say(f"{name}: FLYWHEEL_TOPIC_PREFIX={self.env['FLYWHEEL_TOPIC_PREFIX']} {' '.join(argv[1:])}")
        if self.dry:
            return ""
        log = self.folder / self.src / f"{name}.log"
        done = subprocess.run(argv, cwd=ROOT, env=self.env, capture_output=True, text=True)
        log.write_text(done.stdout + done.stderr)
        if done.returncode != 0:
            raise StepFailed(f"{name} exited {done.returncode}: {done.stderr.strip()[-600:]} (log {log})")
        return done.stdout

    def last_json(self, output: str, dry: dict) -> dict:
        return dry if self.dry else json.loads(output.strip().splitlines()[-1])

    def dpo(self, arm: str, version: int) -> int:
        out = self.child(f"dpo-{arm}", C.dpo_argv(sys.executable, C.policy_of(self.src), version,
                                                  C.annotator(arm, self.seed, self.a.tag), self.seed,
                                                  self.a.dpo_args.split()))
        published = version + 1 if self.dry else C.published_version(out)
        if published is None:
            raise StepFailed(f"dpo-{arm}: no 'published ... version' line (log {self.folder / self.src})")
        return published

    def score(self, arm: str, start: str) -> dict:
        run = C.run_id(f"eval-{arm}", self.seed, self.a.tag)
        self.demo(run, C.EVAL_SEED + self.seed, start, self.a.eval_episodes)
        return {} if self.dry else C.task_means(sql(score_sql(C.policy_of(run), "success")))


def one_seed(s: Seed) -> dict:
    a, tasks = s.a, s.a.tasks
    source = s.demo(s.src, C.SOURCE_SEED + s.seed, C.start_of(s.seed), a.source_episodes, C.SOURCE_EXTRA)
    v = 0 if s.dry else _start_version(source)
    policy = C.policy_of(s.src)
    fixed = s.last_json(s.child("correct", C.correct_argv(sys.executable, policy, tasks, a.k, a.source_episodes,
                                                          C.annotator("c", s.seed, a.tag))),
                        {"by_task": {t: {"corrected": a.k} for t in tasks}})
    counts = {t: n for t, n in C.corrected_counts(fixed["by_task"], tasks).items() if n}
    if not counts:
        raise StepFailed(f"the corrector corrected none of {s.src}'s failures ({fixed['by_task']})")
    record_argv = C.record_argv(sys.executable, tasks, a.k + C.DEMO_MARGIN, C.annotator("d", s.seed, a.tag), s.seed)
    say(f"record: FLYWHEEL_TOPIC_PREFIX={C.prefix_of(s.src)} {' '.join(record_argv[1:])} (flywheel streams routing)")
    recorded = {} if s.dry else _record(s, record_argv)
    paired = s.last_json(s.child("demo-pairs", C.pairs_argv(sys.executable, policy, v, C.annotator("d", s.seed, a.tag),
                                                             counts)),
                         {"by_task": {t: {"paired": n} for t, n in counts.items()}})
    pairs = {"c": counts, "d": {t: paired["by_task"].get(t, {}).get("paired", 0) for t in tasks}}
    versions = {"0": v, "c": s.dpo("c", v), "d": s.dpo("d", v)}
    scores = {arm: s.score(arm, f"{s.src}@{versions[arm]}") for arm in C.ARMS}
    row = C.seed_row(s.seed, scores, pairs, tasks)
    return {**row, "versions": versions, "corrector": fixed["by_task"], "demo_pairs": paired["by_task"],
            "recorded": recorded}


def _start_version(report: Path) -> int:
    """The version the evaluation run started from (its outcome.json's base_version)."""
    value = json.loads((report / "outcome.json").read_text()).get("base_version") if (report / "outcome.json").exists() else None
    if value is None:
        raise StepFailed(f"{report}: no base_version in outcome.json")
    return int(value)


def _record(s: Seed, argv: list[str]) -> dict:
    try:
        return record_routed(C.prefix_of(s.src), argv, s.folder / s.src, "record",
                             ("--app-id", f"{C.prefix_of(s.src)}streams"))  # the source run's own streams group
    except SystemExit as exc:
        raise StepFailed(str(exc)) from None


def write_report(rows: list[dict], out: Path, args) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps({"settings": settings_of(args), "rows": rows}, indent=1))
    seeds = ",".join(str(r["seed"]) for r in rows)
    lines = [f"# What a correction is worth against a demonstration: seeds {seeds or 'none yet'}", "",
             f"V: each seed's `{C.start_of(0).replace('s0', 'sS')}` final version. Corrections: up to {args.k} per "
             f"task of V's failures among {args.source_episodes} episodes a task, through the Episodes view "
             f"(`app.ui.correct`); demonstrations: recorded through the Annotate view (`app.ui.record`), each paired "
             f"where V would first leave it (`app.ui.demo_pairs`), as many per task as corrections. `flywheel dpo` "
             f"from V on each ({args.dpo_args or 'its defaults'}); each arm scored on {args.eval_episodes} episodes "
             f"of every task with training off, the same instances for every arm. Mean over seeds; gains "
             f"mean ± standard error over seeds.", "", *C.table(rows, args.tasks), "",
             f"Command: `{command_line('benchmarks.corrections', args.given)}`", ""]
    path = out / "README.md"
    path.write_text("\n".join(lines))
    return path


SETTINGS = ("tasks", "k", "source_episodes", "eval_episodes", "dpo_args")  # what makes two seeds' rows one table


def settings_of(args) -> dict:
    return {k: getattr(args, k) for k in SETTINGS}


def kept_rows(out: Path, args) -> list[dict]:
    """Finished seeds of an earlier invocation; SystemExit where it ran with other settings (its
    rows are neither mixed with these nor overwritten: another --out keeps both)."""
    path = out / "results.json"
    if not path.exists():
        return []
    earlier = json.loads(path.read_text())
    if earlier.get("settings") != settings_of(args):
        raise SystemExit(f"{path} holds rows of other settings ({earlier.get('settings')}, not "
                         f"{settings_of(args)}): give another --out")
    return earlier.get("rows", [])


def parse(argv: list[str] | None = None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--tasks", default=",".join(TASKS), help="tasks with a routine of a person (app.ui.record_routines)")
    ap.add_argument("--k", type=int, default=5, help="corrections per task (and as many demonstrations' pairs)")
    ap.add_argument("--source-episodes", type=int, default=30, help="V's episodes of every task whose failures are corrected")
    ap.add_argument("--eval-episodes", type=int, default=100, help="evaluation episodes of every task, per arm")
    ap.add_argument("--eval-minutes", type=float, default=10.0, help="wall-clock of each evaluation run at most")
    ap.add_argument("--dpo-args", default="", help="more flywheel dpo options, the same for both arms")
    ap.add_argument("--tag", default="", help="part of every run id (a data dir refuses a run id used before)")
    ap.add_argument("--out", default=str(ROOT / "var" / "corrections"))
    ap.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    ap.add_argument("--report-only", action="store_true", help="rewrite <out>/README.md from <out>/results.json, run nothing")
    add_allow_dirty(ap)
    args = ap.parse_args(argv)
    args.given = list(sys.argv[1:] if argv is None else argv)  # as typed: the report's command line
    args.tasks = [t for t in args.tasks.split(",") if t]
    if args.k < 1 or args.source_episodes < 1 or args.eval_episodes < 1 or not args.tasks:
        ap.error("--k, --source-episodes and --eval-episodes must be >= 1, and --tasks name at least one task")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    out, seeds = Path(args.out), [int(s) for s in args.seeds.split(",") if s]
    if args.dry_run:
        for seed in seeds:
            one_seed(Seed(args, seed, out))
        return 0
    if args.report_only:
        print(f"report: {write_report([r for r in kept_rows(out, args) if r['seed'] in seeds], out, args)}")
        return 0
    print(f"commit: {record(out, commit_to_run(ROOT, args.allow_dirty))}", flush=True)
    os.environ.setdefault("FLYWHEEL_DATA_DIR", str(ROOT / "var"))
    rows = kept_rows(out, args)
    with stoppable_runs("what was measured is written"):
        for seed in seeds:
            if any(r["seed"] == seed for r in rows):
                say(f"seed {seed}: kept from an earlier invocation")
                continue
            try:
                rows.append(one_seed(Seed(args, seed, out)))
                write_report(rows, out, args)
            except (StepFailed, UserError) as exc:
                print(f"seed {seed} left out: {exc}", file=sys.stderr, flush=True)
    print(f"report: {write_report(rows, out, args)}")
    return 0
