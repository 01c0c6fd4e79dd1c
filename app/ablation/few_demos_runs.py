"""Few demonstrations recorded through the UI, plus RL (issue 59, item 3; app.few_demos says what
one cell is): for each seed and N, record N demonstrations of each task through the Annotate view
on the cell's own platform topics (`flywheel streams` routing them), then a `flywheel demo
--demos-from human` of --minutes; N = 0 records nothing and runs the demo from random weights.
One heavy job at a time. Writes <out>/results.json and <out>/few_demos.md.

    python -m benchmarks.few_demos --minutes 20 --seeds 0,1,2               # the full table
    python -m benchmarks.few_demos --dry-run                                # the commands only
    python -m benchmarks.few_demos --report-only                            # re-read finished runs

A cell whose demo ended on its own is kept: rerunning resumes the table. One left unfinished (a
stop, a crash, a cut-off session, a demo stopped by someone else) is reported and not measured;
a new --tag runs it afresh. Each cell's folder records the commit it ran at (commit.json).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from app.ablation.clean_stop import stoppable_runs
from app.ablation.marked import UNFINISHED, run_marked, stopped_by, why_unfinished
from app.few_demos import NS, TASKS, USES, Cell, cells, demo_argv, record_argv, result_row, streams_argv, table
from app.phases import human_demonstrations
from app.provenance import add_allow_dirty, commit_to_run, record
from infra.kafka.own_broker import ROOT
from infra.runtime.admin import ensure_topics
from infra.runtime.settings import load_settings

ROUTE_WAIT_S = 180.0


def record_cell(cell: Cell, tasks: list[str], args, run_dir: Path) -> dict:
    """Record the cell's demonstrations on its own platform topics; -> the recorder's tally per task."""
    return record_routed(cell.platform_prefix(args.tag), record_argv(sys.executable, cell, tasks, args.tag),
                         run_dir, cell.name(args.tag))


def record_routed(prefix: str, argv: list[str], run_dir: Path, name: str, streams_extra: tuple[str, ...] = ()) -> dict:
    """Run the recorder ``argv`` on ``prefix``'s topics with `flywheel streams` (and
    ``streams_extra``) routing what it records; -> its tally per task. Waits until every recorded
    success of a person on those topics is on flywheel.sft.v1. SystemExit when it fails."""
    env = {**os.environ, "FLYWHEEL_TOPIC_PREFIX": prefix, "PYTHONPATH": str(ROOT)}
    ensure_topics(load_settings({"topic_prefix": prefix}))
    run_dir.mkdir(parents=True, exist_ok=True)
    streams = subprocess.Popen([*streams_argv(sys.executable), *streams_extra], cwd=ROOT, env=env,
                               stdout=open(run_dir / "streams.log", "wb"), stderr=subprocess.STDOUT)
    try:
        before = len(human_demonstrations(load_settings({"topic_prefix": prefix}), 20))
        done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True)
        (run_dir / "record.log").write_text(done.stdout + done.stderr)
        if done.returncode != 0:
            raise SystemExit(f"{name}: the recorder failed: {done.stderr[-1000:]}")
        tally = json.loads(done.stdout.strip().splitlines()[-1])["by_task"]
        want, end = before + sum(t["success"] for t in tally.values()), time.monotonic() + ROUTE_WAIT_S
        while len(human_demonstrations(load_settings({"topic_prefix": prefix}), 20)) < want:
            if time.monotonic() > end:
                raise SystemExit(f"{name}: {want - before} successes recorded, not all on sft after "
                                 f"{ROUTE_WAIT_S:.0f} s (see {run_dir / 'streams.log'})")
            time.sleep(3)
        return tally
    finally:
        streams.terminate()
        streams.wait(60)


def run_cell(cell: Cell, tasks: list[str], args, out: Path, commit: dict) -> None:
    """Record the cell's demonstrations and run its demo, unless its run finished before. A cell
    left unfinished (a stop, a crash, a cut-off session) is not run again under its id: the data
    dir refuses a used run id (and on a lasting broker its platform topics already hold its
    recorded demonstrations: recording again would clone twice as many); it says so, and a new
    --tag runs it afresh. A failed recording or a demo that refused its options (it exits at once,
    before its logs) stops the benchmark (CellFailed): the next cells would fail alike."""
    run_dir = out / "runs" / cell.name(args.tag)
    if state(run_dir) == "finished":
        print(f"== {cell.name(args.tag)}: finished before, kept", flush=True)
        return
    if run_dir.exists():
        print(f"== {cell.name(args.tag)}: {why_unfinished(run_dir)}; not measured (run it again under a new --tag)", flush=True)
        return
    run_dir.mkdir(parents=True)
    marker = run_dir / UNFINISHED
    marker.write_text(f"started {time.strftime('%Y-%m-%d %H:%M:%S')}, not ended\n")
    record(run_dir, commit)  # the commit this cell ran at (a later invocation rewrites <out>/commit.json)
    try:
        tally = record_cell(cell, tasks, args, run_dir) if cell.n else {}
    except SystemExit as exc:
        marker.write_text(f"the recording failed: {exc}\n")
        raise CellFailed(str(exc)) from None
    (run_dir / "recorded.json").write_text(json.dumps(tally))
    os.environ["FLYWHEEL_TOPIC_PREFIX"] = cell.platform_prefix(args.tag)  # the demo reads the demonstrations there
    argv = demo_argv(sys.executable, cell, tasks, args.minutes, run_dir, args.tag, args.demo_args.split(), args.use)
    print(f"== {cell.name(args.tag)}: {' '.join(argv[3:])}", flush=True)
    rc = run_marked(argv, ROOT, run_dir, args.minutes)
    stop = stopped_by(run_dir)
    print(f"== {cell.name(args.tag)}: exit {rc}{f' ({stop})' if stop else ''}", flush=True)
    if rc != 0 and not (run_dir / "logs").exists():
        raise CellFailed(f"{cell.name(args.tag)}: the demo exited {rc} before it started (its options? see above)")


class CellFailed(RuntimeError):
    """A cell failed in a way the next cells would too: the benchmark stops and measures what finished."""


def state(run_dir: Path) -> str:
    """"finished" (the demo ended on its own and wrote its summary), else "not run" or "unfinished"."""
    if not run_dir.exists():
        return "not run"
    return "unfinished" if why_unfinished(run_dir) else "finished"


def measured(cell: Cell, tasks: list[str], out: Path, tag: str) -> dict | None:
    """The cell's row from its run's summary.json and the recorder's tally (None: no finished run)."""
    run_dir = out / "runs" / cell.name(tag)
    why = why_unfinished(run_dir)  # "not run" where there is no folder
    if why:
        print(f"{cell.name(tag)}: {why} ({run_dir})", file=sys.stderr)
        return None
    recorded = json.loads((run_dir / "recorded.json").read_text()) if (run_dir / "recorded.json").exists() else {}
    return result_row(cell, tasks, json.loads((run_dir / "summary.json").read_text()), recorded)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", default=",".join(TASKS), help="tasks with a recorder routine (app.ui.record_routines)")
    ap.add_argument("--ns", default=",".join(map(str, NS)), help="demonstrations per task, one cell each")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--minutes", type=float, default=20.0)
    ap.add_argument("--out", default=str(ROOT / "var" / "few_demos"))
    ap.add_argument("--tag", default="", help="tells these runs' ids and topics from earlier ones")
    ap.add_argument("--demo-args", default="", help="more options for every demo")
    ap.add_argument("--use", choices=USES, default="clone",
                    help="what a cell does with its demonstrations: clone them into pi_sft, or guide the exploration "
                         "floor's clicks from random weights (--explore-from human); give it its own --tag and --out")
    ap.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    ap.add_argument("--report-only", action="store_true", help="measure the finished runs under --out, run nothing")
    add_allow_dirty(ap)
    args = ap.parse_args()
    tasks, out = args.tasks.split(","), Path(args.out)
    plan = cells([int(n) for n in args.ns.split(",")], [int(s) for s in args.seeds.split(",")])
    if args.dry_run:
        for cell in plan:
            run_dir = out / "runs" / cell.name(args.tag)
            prefix = f"FLYWHEEL_TOPIC_PREFIX={cell.platform_prefix(args.tag)}"
            if cell.n:
                print(f"{prefix} {' '.join(streams_argv('python'))} &  # routes the recorded demonstrations")
                print(f"{prefix} {' '.join(record_argv('python', cell, tasks, args.tag))}")
            argv = demo_argv('python', cell, tasks, args.minutes, run_dir, args.tag, args.demo_args.split(), args.use)
            print(f"{prefix} {' '.join(argv)}")
        return 0
    if not args.report_only:
        commit = commit_to_run(ROOT, args.allow_dirty)
        record(out, commit)
        with stoppable_runs("no further cell; the finished ones are measured"):
            try:
                for cell in plan:
                    run_cell(cell, tasks, args, out, commit)
            except CellFailed as exc:
                print(f"stopped: {exc}; no further cell, the finished ones are measured", file=sys.stderr, flush=True)
    results = [r for r in (measured(c, tasks, out, args.tag) for c in plan) if r is not None]
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps({"tasks": tasks, "minutes": args.minutes, "use": args.use,
                                                  "results": results}, indent=1))
    (out / "few_demos.md").write_text("\n".join(table(results, tasks, args.minutes, args.use)) + "\n")
    print("\n".join(table(results, tasks, args.minutes, args.use)))
    return 0
