"""The floor, bare sandboxes doing the main job's work and the main job, per group of tasks, in one table.

Issue 57's one benchmark, one run.

    python -m benchmarks.bench_main_job_groups [--groups default,multistep,games] [--minutes default=15,games=30]
        [--seed 0] [--sandboxes N] [--floor-steps 30] [--bare-steps 60] [--run-id R] [--out DIR] [--bare-only L]

For each group (a registered suite: ``default``, ``multistep``, the tasks in no other suite,
``games``), one after the other on one machine (one heavy job at a time):
1. the floor, the least a step can be: click + screenshot (bench_rollout.bare_loop) on the group's
   task pages, one page alone and N sandboxes at once (N: what the demo sizes to this machine,
   producers.capacity), each page loaded before its steps are timed;
2. and 3. bench_main_job.measure: bare sandboxes clicking at random, the main job (``flywheel demo
   --tasks G --minutes M``), bare sandboxes again, then bare sandboxes doing the main job's work
   (a new task page every L steps, L the main job's mean episode length during RL); the main job's
   steps/s, env p50 and episodes per minute are read from ClickHouse over its RL phase (acting
   version >= 1: the games' cold start before it is left out), its busy share from its report.
The table (app.ablation.main_job_table) and every group's figures go to ``<out>/<run id>/results.md``
and ``results.json``, rewritten after each group, beside ``commit.json``; each group's demo report
and result.json under ``<out>/<run id>/<group>/``. ``--bare-only L`` skips the demo: the floor and
the bare loop with a new page every L steps only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
import uuid
from dataclasses import asdict
from pathlib import Path

from app.ablation.main_job_table import GROUPS, GroupFigures, group_minutes, markdown
from app.ablation.runs import ROOT
from app.demo_config import RUN_ID
from app.provenance import add_allow_dirty, commit_to_run, record
from benchmarks.bench_main_job import bare, measure
from benchmarks.bench_main_loop import started_sandboxes
from benchmarks.bench_rollout import bare_loop
from producers.capacity import machine_sandboxes
from producers.sandboxes.browser import BrowserSandbox
from producers.suites import SUITES, plan
from producers.tasks import build_tasks


async def floor_rate(boxes: list[BrowserSandbox], tasks: list, steps: int) -> float:
    """Steps/s of ``boxes`` doing click + screenshot at once, in rounds over ``tasks`` (each round
    gives each box the next task; its page is loaded and stepped 3 times before the round's steps
    are timed)."""
    done = seconds = 0.0
    for r in range(-(-len(tasks) // len(boxes))):
        picks = [(r * len(boxes) + i) % len(tasks) for i in range(len(boxes))]
        await asyncio.gather(*(sb.reset(tasks[k]) for sb, k in zip(boxes, picks)))
        # a page's first frames after its load cost more than the steady state the floor stands for
        await asyncio.gather(*(bare_loop(sb._page, sb._cdp, 3, random.Random(-k)) for sb, k in zip(boxes, picks)))
        t0 = time.perf_counter()
        await asyncio.gather(*(bare_loop(sb._page, sb._cdp, steps, random.Random(k)) for sb, k in zip(boxes, picks)))
        seconds += time.perf_counter() - t0
        done += steps * len(boxes)
    return done / seconds


async def floor(n: int, group: str, steps: int) -> tuple[float, float]:
    """-> (one page's floor, ``n`` sandboxes' floor) on ``group``'s tasks, in steps/s."""
    runplan = plan([group], 0)
    tasks = build_tasks("miniwob", list(runplan.tasks), 1, max_steps=runplan.max_steps,
                        prefix=f"floor{uuid.uuid4().hex[:6]}.")
    async with started_sandboxes(n, "bench-floor-blobs-") as boxes:
        return await floor_rate(boxes[:1], tasks, steps), await floor_rate(boxes, tasks, steps)


def from_result(fig: GroupFigures, result: dict) -> None:
    """Fill ``fig`` with bench_main_job.measure's figures of the main job's RL phase."""
    ppo = result["main_job"]["ppo"]
    fig.bare, fig.bare_every = result["capacity_same_episodes"], result["bare_every"]
    fig.main, fig.env_p50_ms = ppo["steps_per_s"], ppo.get("env_p50_ms")
    fig.machine_busy, fig.episodes_per_minute = result["machine_busy"], result["rl_episodes"].get("per_minute")


def run_group(group: str, n: int, args, minutes: float, run_id: str, top: Path, commit: dict) -> GroupFigures:
    fig = GroupFigures(group, n)
    fig.floor_one_page, fig.floor = asyncio.run(floor(n, group, args.floor_steps))
    print(f"[{group}] floor (click + screenshot): one page {fig.floor_one_page:.1f} steps/s, {n} sandboxes "
          f"{fig.floor:.1f} steps/s", flush=True)
    if args.bare_only:
        b = bare(n, group, args.bare_steps, args.bare_only)
        fig.bare, fig.bare_every, fig.note = b.steps_per_s, args.bare_only, "no main job (--bare-only)"
        print(f"[{group}] bare, a new page every {args.bare_only} steps: {fig.bare:.1f} steps/s", flush=True)
        return fig
    try:
        result = measure(n, group, minutes, args.seed, f"{run_id}-{group}", top / group, args.demo_args,
                         args.bare_steps, commit)
    except RuntimeError as exc:
        print(f"[{group}] {exc}", file=sys.stderr, flush=True)
        fig.note = str(exc)
        return fig
    from_result(fig, result)
    return fig


def write(top: Path, rows: list[GroupFigures], meta: dict) -> str:
    table = markdown(rows)
    (top / "results.md").write_text(f"# Floor, bare sandboxes and the main job ({meta['run_id']})\n\n{table}")
    (top / "results.json").write_text(json.dumps({**meta, "groups": [{**asdict(r), "main_over_floor": r.main_over_floor,
                                                                       "main_over_bare": r.main_over_bare}
                                                                      for r in rows]}, indent=1))
    return table


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--groups", default=",".join(GROUPS), help="registered suites, comma-separated, measured in order")
    p.add_argument("--minutes", default="",
                   help="the demo's --minutes: one number for every group, or group=minutes pairs "
                        "(default default=15,multistep=15,games=30: the games' cold start comes first)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sandboxes", type=int, default=0,
                   help="sandboxes of the floor, the bare loops and the demo's rollout worker (0: producers.capacity's)")
    p.add_argument("--floor-steps", type=int, default=30, help="click + screenshot steps per page of the floor")
    p.add_argument("--bare-steps", type=int, default=60, help="steps per sandbox of each bare loop")
    p.add_argument("--run-id", default="", help="this benchmark's id; each group's demo runs as <id>-<group> "
                                                "(default: groups-<time>)")
    p.add_argument("--out", default=str(ROOT / "var" / "bench_main_job"), help="folder of the results")
    p.add_argument("--demo-args", default="", help="more demo options for every group, one string")
    p.add_argument("--bare-only", type=int, default=0, metavar="L",
                   help="no demo: the floor and the bare loop with a new task page every L steps")
    add_allow_dirty(p)
    args = p.parse_args(argv)
    args.groups = [g.strip() for g in args.groups.split(",") if g.strip()]
    unknown = [g for g in args.groups if g not in SUITES]
    if not args.groups or unknown:
        p.error(f"--groups must name registered suites ({', '.join(sorted(SUITES))}); got {unknown or 'none'}")
    if args.sandboxes < 0 or args.bare_only < 0 or args.floor_steps < 1 or args.bare_steps < 1:
        p.error("--sandboxes and --bare-only must be >= 0, --floor-steps and --bare-steps >= 1")
    try:
        args.minutes = group_minutes(args.minutes, args.groups)
    except ValueError as exc:
        p.error(str(exc))
    args.run_id = args.run_id or f"groups-{time.strftime('%m%d%H%M')}"
    if not RUN_ID.fullmatch(f"{args.run_id}-{max(args.groups, key=len)}"):
        p.error(f"--run-id {args.run_id!r}: letters, digits, '.', '_' and '-' only, a letter or digit first")
    return args


def main() -> int:
    args = parse()
    n, top = args.sandboxes or machine_sandboxes(1), Path(args.out) / args.run_id
    commit = commit_to_run(ROOT, args.allow_dirty)
    print(f"commit: {record(top, commit)}", flush=True)
    meta = {"run_id": args.run_id, "commit": commit, "sandboxes": n, "minutes": args.minutes, "seed": args.seed,
            "floor_steps": args.floor_steps, "bare_steps": args.bare_steps, "bare_only": args.bare_only,
            "demo_args": args.demo_args}
    rows: list[GroupFigures] = []
    for group in args.groups:
        rows.append(run_group(group, n, args, args.minutes[group], args.run_id, top, commit))
        table = write(top, rows, meta)
    print(f"\n{table}\nresults: {top / 'results.md'}, {top / 'results.json'}")
    return 0 if all(r.main is not None or args.bare_only for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
