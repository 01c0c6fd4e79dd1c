"""The report's suite mean over time, computed by real embedded chDB: at each moment, the mean over
tasks of each task's last 100 episodes ended by then, and when it first reached a target."""

from __future__ import annotations

from consumers.rows import rows_for
from infra.app.demo_queries import suite_mean_over_time
from infra.app.report import suite_mean_reached
from infra.clickhouse.client import make_client
from infra.runtime.settings import load_settings
from schemas.events import TaskSpec, Trajectory

T0 = 1.8e9


def trajectory(k: int, task: str, ended: float, success: bool, policy: str = "pixel-r") -> Trajectory:
    return Trajectory(episode_id=f"{policy}-{task}-{k}", task=TaskSpec(task_id=f"{task}-{k}", suite="miniwob", name=task),
                      sandbox="s", worker_id="w", policy=policy, steps=[], status="ended", success=success,
                      started_at=ended - 1.0, ended_at=ended)


def test_suite_mean_follows_each_tasks_last_100_as_of_each_moment(tmp_path):
    # task a: 150 episodes over the first 150 s, failing until 100 s, then succeeding;
    # task b: 50 episodes from 100 s on, all successes; another policy's episodes must not count
    trajs = [trajectory(k, "a", T0 + k + 0.5, k >= 100) for k in range(150)]
    trajs += [trajectory(k, "b", T0 + 100 + k + 0.5, True) for k in range(50)]
    trajs += [trajectory(k, "a", T0 + k + 0.5, True, policy="pixel-other") for k in range(150)]
    rows = [r for t in trajs for r in rows_for("trajectories", t)["trajectories"]]
    client = make_client(load_settings({"data_dir": str(tmp_path)}))
    try:
        client.insert("trajectories", [list(r.values()) for r in rows], column_names=list(rows[0]))
        client.insert("trajectories", [list(r.values()) for r in rows[:10]], column_names=list(rows[0]))  # a replay
        got = client.query(suite_mean_over_time("pixel-r", T0, 50, 3)).result_rows
    finally:
        client.close()
    # at 50 s: only a, 50 failures; at 100 s: a's 100 failures; at 150 s: a's last 100 are
    # 50 failures + 50 successes (0.5), b's 50 are successes (1.0)
    assert [(r[0], r[1], r[2], r[3]) for r in got] == [(50, 0.0, 1, 50), (100, 0.0, 1, 100), (150, 0.75, 2, 50)]
    assert suite_mean_reached(got, 0.7, window=50) == 150.0
    assert suite_mean_reached(got, 0.8, window=50) is None
    assert suite_mean_reached(got, 0.7) is None  # b has only 50 episodes: not yet a full window of 100
    # a moment when only some tasks had episodes does not count as reaching a target
    assert suite_mean_reached([(10, 0.9, 1, 5), (20, 0.5, 2, 9)], 0.8, window=1) is None


def test_the_reports_time_axes_are_minutes_since_the_start(tmp_path):
    """Learning curve and suite-mean tables keyed by minutes since the run began, not unix time."""
    from infra.app.demo_queries import success_over_time
    from infra.app.report import as_minutes

    trajs = [trajectory(k, "a", T0 + 60 * k + 5, k % 2 == 0) for k in range(4)]  # one per minute
    rows = [r for t in trajs for r in rows_for("trajectories", t)["trajectories"]]
    client = make_client(load_settings({"data_dir": str(tmp_path)}))
    try:
        client.insert("trajectories", [list(r.values()) for r in rows], column_names=list(rows[0]))
        got = client.query(success_over_time("pixel-r", 60, T0))
    finally:
        client.close()
    assert got.column_names[1] == "minute"
    assert [(r[1], r[2], r[3]) for r in got.result_rows] == [(0.0, 1, 1.0), (1.0, 1, 0.0), (2.0, 1, 1.0), (3.0, 1, 0.0)]
    cols, shown = as_minutes(["at_s", "suite_mean"], [(90, 0.5), (150, 0.7)], 0)
    assert cols == ["minute", "suite_mean"] and shown == [(1.5, 0.5), (2.5, 0.7)]
