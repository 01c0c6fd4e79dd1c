"""The whole main job's environment steps/s against the bare capacity of the same sandboxes.

    python -m benchmarks.bench_main_job [--minutes 15] [--seed 0] [--tasks default] [--bare-steps 60] [--run-id R]
        [--sandboxes N] [--bare-only L]

All in one run, on one machine, one after the other (one heavy job at a time):
1. bare capacity: as many browser sandboxes as the demo sizes to this machine
   (producers.capacity), stepping random clicks on the suite's tasks and nothing else
   (bench_main_loop.bare_capacity);
2. the main job: ``flywheel demo --minutes M`` as a user runs it, the trainer, the streams, the
   sink and the broker sharing the machine with the rollout worker;
3. bare capacity again; the ratio uses the mean of the two;
4. bare capacity doing the main job's work: the same random clicks, but a new task page every L
   steps, L the main job's mean episode length during PPO (a solved task ends in 1-3 steps; random
   clicks play longer episodes, and a page reset costs the browser more than a click).
The main job's steps/s are read back from ClickHouse: the run policy's steps from the first PPO
step (acting version >= 1) to its last, and over all its acting (pi_sft's episodes included),
with the env step's p50 and the episodes per minute played wholly in RL; the machine's busy share
is its report's (CPU by process). The issue's target is a ratio >= 0.5 during PPO.
``python -m benchmarks.bench_main_job_groups`` runs this on several groups of tasks, each after
the floor (click + screenshot), and writes one table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

from app.ablation.main_job_table import episode_sql, machine_busy, rate_sql, rl_episodes_sql
from app.ablation.runs import ROOT, sql
from app.provenance import add_allow_dirty, commit_to_run, record
from benchmarks.bench_main_loop import Bare, bare_capacity

from producers.capacity import machine_sandboxes
from producers.suites import plan
from producers.tasks import build_tasks


def bare(n: int, suite: str, steps: int, episode_steps: int = 0) -> Bare:
    runplan = plan(suite.split(","), 0)
    tasks = build_tasks("miniwob", list(runplan.tasks), 4, max_steps=runplan.max_steps,
                        prefix=f"bench{uuid.uuid4().hex[:6]}.")
    return asyncio.run(bare_capacity(n, tasks, steps, episode_steps))


def bare_only(n: int, tasks: str, steps: int, every: int) -> list[Bare]:
    """The bare loop as it is, then with a new task page every ``every`` steps (no demo)."""
    out = []
    for episode_steps in (0, every):
        b = bare(n, tasks, steps, episode_steps)
        print(f"bare capacity, {n} sandboxes, a new page {f'every {episode_steps} steps or ' if episode_steps else ''}"
              f"when the task ends: {b.steps_per_s:.1f} env steps/s ({b.steps_per_episode:.1f} steps per episode)", flush=True)
        out.append(b)
    return out


def measure(n: int, tasks: str, minutes: float, seed: int, run_id: str, out: Path, demo_args: str = "",
            bare_steps: int = 60, commit: dict | None = None) -> dict:
    """Bare capacity, the main job (``flywheel demo``), bare capacity again, then bare capacity
    with the main job's episode length; the main job's figures read back from ClickHouse and its
    report. -> the result, also written to ``out/result.json``; RuntimeError when the demo failed or
    left too few steps to time."""
    out.mkdir(parents=True, exist_ok=True)
    before = bare(n, tasks, bare_steps)
    print(f"bare capacity: {n} sandboxes, random clicks: {before.steps_per_s:.1f} env steps/s "
          f"({before.steps_per_episode:.1f} steps per episode)", flush=True)
    argv = [sys.executable, "-m", "app.cli", "demo", "--run-id", run_id, "--minutes", str(minutes),
            "--seed", str(seed), "--tasks", tasks, "--report-dir", str(out / "report"),
            "--progress-s", "30", "--sandboxes", str(n), *demo_args.split()]
    print(f"main job: {' '.join(argv[3:])}", flush=True)
    rc = subprocess.run(argv, cwd=ROOT).returncode
    if rc != 0:
        raise RuntimeError(f"the demo exited with {rc}: no ratio")
    after = bare(n, tasks, bare_steps)
    capacity = statistics.mean([before.steps_per_s, after.steps_per_s])
    print(f"bare capacity again: {after.steps_per_s:.1f} env steps/s; the ratios use the mean, {capacity:.1f}", flush=True)

    policy = f"pixel-{run_id}"
    rows = {"ppo": sql(rate_sql(policy, 1))[0], "all acting": sql(rate_sql(policy, 0))[0]}
    if any(r["steps_per_s"] is None for r in rows.values()):  # no step, or all in one millisecond
        raise RuntimeError(f"the demo left too few steps of {policy} in ClickHouse to time: {rows}")
    # the same work as the main job's: random clicks, but a new page as often as its episodes end
    main_episode = float(sql(episode_sql(policy))[0]["steps_per_episode"] or 0)
    every = max(1, round(main_episode))
    same = bare(n, tasks, bare_steps, every)
    print(f"bare capacity with the main job's episode length ({main_episode:.1f} steps, a new page every "
          f"{every}): {same.steps_per_s:.1f} env steps/s", flush=True)
    report = out / "report" / "report.md"
    result = {"run_id": run_id, "commit": commit, "tasks": tasks, "minutes": minutes, "sandboxes": n,
              "bare_steps_per_s": [before.steps_per_s, after.steps_per_s],
              "bare_steps_per_episode": [before.steps_per_episode, after.steps_per_episode], "capacity": capacity,
              "main_job_steps_per_episode": main_episode, "bare_every": every, "capacity_same_episodes": same.steps_per_s,
              "main_job": {k: {**r, "ratio": r["steps_per_s"] / capacity,
                               "ratio_same_episodes": r["steps_per_s"] / same.steps_per_s} for k, r in rows.items()},
              "rl_episodes": sql(rl_episodes_sql(policy))[0],
              "machine_busy": machine_busy(report.read_text()) if report.exists() else None,
              "sql": {"ppo": rate_sql(policy, 1), "all acting": rate_sql(policy, 0), "episodes": episode_sql(policy),
                      "rl_episodes": rl_episodes_sql(policy)}}
    (out / "result.json").write_text(json.dumps(result, indent=1))
    return result


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=15.0, help="the demo's --minutes")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tasks", default="default", help="the demo's --tasks (MiniWoB++ suites or tasks)")
    p.add_argument("--bare-steps", type=int, default=60, help="steps per sandbox of each bare loop")
    p.add_argument("--run-id", default="", help="the demo's run id (default: mainjob-<time>)")
    p.add_argument("--out", default=str(ROOT / "var" / "bench_main_job"), help="folder of the report and results")
    p.add_argument("--sandboxes", type=int, default=0,
                   help="browser sandboxes of both the bare loop and the demo's one rollout worker (0: what the demo sizes "
                        "to this machine, producers.capacity)")
    p.add_argument("--demo-args", default="", help="more demo options, one string")
    p.add_argument("--bare-only", type=int, default=0, metavar="L",
                   help="no demo: the bare loop as it is and with a new task page every L steps (a main job's episode length)")
    add_allow_dirty(p)
    args = p.parse_args()
    if args.sandboxes < 0 or args.bare_only < 0:
        p.error("--sandboxes and --bare-only must be >= 0")
    run_id = args.run_id or f"mainjob-{time.strftime('%m%d%H%M')}"
    n, out = args.sandboxes or machine_sandboxes(1), Path(args.out) / run_id
    commit = commit_to_run(ROOT, args.allow_dirty)
    print(f"commit: {record(out, commit)}", flush=True)
    if args.bare_only:
        bare_only(n, args.tasks, args.bare_steps, args.bare_only)
        return 0
    try:
        result = measure(n, args.tasks, args.minutes, args.seed, run_id, out, args.demo_args, args.bare_steps, commit)
    except RuntimeError as exc:
        print(exc, file=sys.stderr)
        return 1
    capacity, same = result["capacity"], result["capacity_same_episodes"]
    print(f"\n| phase | steps | seconds | env steps/s | / bare ({capacity:.1f}) | / bare, same episodes ({same:.1f}) |"
          f"\n|---|---|---|---|---|---|")
    for k, r in result["main_job"].items():
        print(f"| {k} | {r['steps']} | {r['seconds']:.0f} | {r['steps_per_s']:.1f} | {r['ratio']:.2f} | "
              f"{r['ratio_same_episodes']:.2f} |")
    print(f"\nresults: {out / 'result.json'}; the demo's report (each process's CPU, step latency): {out / 'report'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
