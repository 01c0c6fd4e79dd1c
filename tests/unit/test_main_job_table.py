"""app.ablation.main_job_table (python -m benchmarks.bench_main_job_groups, issue 57's one benchmark):
the per-group minutes, the report's busy share, the ratios and the table; and the benchmark's own
arguments, run as a user runs it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.ablation.main_job_table import (GROUPS, GroupFigures, episode_sql, group_minutes, machine_busy, markdown,
                                         rate_sql, ratio, rl_episodes_sql)
from infra.runtime.cpu_share import CpuShare

ROOT = Path(__file__).resolve().parents[2]


def test_minutes_default_per_group_one_number_or_pairs():
    assert group_minutes("", list(GROUPS)) == {"default": 15.0, "multistep": 15.0, "games": 30.0}
    assert group_minutes("2", ["default", "games"]) == {"default": 2.0, "games": 2.0}
    assert group_minutes("games=20, default=10", list(GROUPS)) == {"default": 10.0, "multistep": 15.0, "games": 20.0}
    assert group_minutes("", ["starter"]) == {"starter": 15.0}  # a suite with no default of its own


@pytest.mark.parametrize("spec", ["games=0", "-1", "nosuch=3", "games=x", "x"])
def test_minutes_refuses_bad_specs(spec):
    with pytest.raises(ValueError):
        group_minutes(spec, list(GROUPS))


def test_machine_busy_reads_the_all_row_the_demo_writes():
    share = CpuShare()
    share.seen["rollout-0"][1] = 90.0
    share.first["rollout-0"][1] = 0.0
    share.seen["trainer"][2] = 30.0
    share.first["trainer"][2] = 0.0
    share.ended = share.started + 100.0  # 1.2 cores over 100 s
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    report = "# Run\n\n| all | 5 | 0.50 | 99% |\n\n" + share.markdown() + "## Configuration\n"
    assert machine_busy(report) == pytest.approx(round(120 / cores) / 100)  # the CPU section's row, not the first


def test_machine_busy_is_none_without_the_cpu_section():
    assert machine_busy("# Run\n\n| all | 5 | 0.50 | 99% |\n") is None
    assert machine_busy("## CPU by process\n\nno table\n") is None


def test_ratios_leave_out_what_was_not_measured():
    assert ratio(15.0, 60.0) == 0.25 and ratio(None, 60.0) is None and ratio(15.0, None) is None
    assert ratio(15.0, 0.0) is None
    fig = GroupFigures("default", 4, floor=60.0, floor_one_page=40.0, bare=20.0, bare_every=3, main=15.0)
    assert fig.main_over_floor == 0.25 and fig.main_over_bare == 0.75
    assert GroupFigures("games", 4, floor=60.0).main_over_floor is None


def test_the_table_has_one_row_per_group_and_dashes_for_missing_figures():
    rows = [GroupFigures("default", 4, floor=60.0, floor_one_page=40.0, bare=20.0, bare_every=3, main=15.0,
                         env_p50_ms=81.0, machine_busy=0.85, episodes_per_minute=300.0),
            GroupFigures("games", 4, floor=50.0, floor_one_page=35.0, note="the demo exited with 1: no ratio")]
    text = markdown(rows)
    lines = [line for line in text.splitlines() if line.startswith("| default") or line.startswith("| games")]
    assert lines[0] == ("| default | 60.0 (N=4) | 40.0 | 20.0 (L=3) | 15.0 | 0.25 | 0.75 | 81 | 85% | 300.0 |")
    assert lines[1] == "| games | 50.0 (N=4) | 35.0 | — | — | — | — | — | — | — |"
    assert "- games: the demo exited with 1: no ratio" in text and ">= 60)" in text


def test_the_sql_reads_the_rl_phase_of_one_quoted_policy():
    assert "policy_version >= 1" in rate_sql("pixel-r1", 1) and "latency_env_ms" in rate_sql("pixel-r1", 1)
    assert "policy_version_min >= 1" in rl_episodes_sql("pixel-r1") and "'pixel-r1'" in episode_sql("pixel-r1")
    for build in (lambda p: rate_sql(p, 1), episode_sql, rl_episodes_sql):
        with pytest.raises(ValueError):
            build("x' OR 1=1 --")


def bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "benchmarks.bench_main_job_groups", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def test_the_benchmark_says_its_options():
    out = bench("--help")
    assert out.returncode == 0, out.stderr
    for option in ("--groups", "--minutes", "--floor-steps", "--bare-only", "--allow-dirty"):
        assert option in out.stdout


@pytest.mark.parametrize("args, says", [
    (["--groups", "default,nosuch"], "--groups must name registered suites"),
    (["--minutes", "games=0"], "minutes must be > 0"),
    (["--minutes", "starter=5"], "not one of the groups"),
    (["--floor-steps", "0"], "--floor-steps"),
    (["--run-id", "bad/id"], "--run-id"),
])
def test_the_benchmark_refuses_bad_arguments_before_it_measures(args, says):
    out = bench(*args, "--out", "/nonexistent/never-written")
    assert out.returncode == 2 and says in out.stderr, out.stderr


def test_the_single_group_benchmark_still_says_and_checks_its_options():
    out = subprocess.run([sys.executable, "-m", "benchmarks.bench_main_job", "--help"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "--bare-only" in out.stdout, out.stderr
    out = subprocess.run([sys.executable, "-m", "benchmarks.bench_main_job", "--sandboxes", "-1"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "must be >= 0" in out.stderr, out.stderr
