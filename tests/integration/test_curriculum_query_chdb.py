"""The curriculum's reading on real embedded chDB: each task's success and mean episode length over
its last ``WINDOW`` ended episodes, a replayed row counted once, other policies and aborted
episodes left out (issue 56: the feed shares the RL steps by that length)."""

from __future__ import annotations

from app.curriculum import WINDOW
from app.demo_queries import last_n_success
from consumers.rows import rows_for
from infra.clickhouse.client import make_client
from infra.runtime.settings import load_settings
from schemas.events import TaskSpec, Trajectory

T0 = 1.8e9


def row(k: int, task: str, steps: int, success: bool, policy: str = "pixel-r", status: str = "ended") -> dict:
    t = Trajectory(episode_id=f"{policy}-{task}-{k}", task=TaskSpec(task_id=f"{task}-{k}", suite="games", name=task),
                   sandbox="s", worker_id="w", policy=policy, steps=[], status=status, success=success,
                   started_at=T0 + k, ended_at=T0 + k + 0.5)
    (r,) = rows_for("trajectories", t)["trajectories"]
    return {**r, "num_steps": steps}


def test_the_curriculums_query_returns_each_tasks_mean_length_over_its_window(tmp_path):
    # mines: 10 old episodes of 50 steps, then WINDOW of 4 steps; 2048: 5 episodes of 300 steps
    rows = [row(k, "games.mines", 50, False) for k in range(10)]
    rows += [row(10 + k, "games.mines", 4, k % 3 == 0) for k in range(WINDOW)]
    rows += [row(k, "games.2048", 300, False) for k in range(5)]
    rows += [row(100 + k, "games.2048", 1, False, policy="pixel-other") for k in range(5)]  # another run's
    rows += [row(200, "games.2048", 1, False, status="aborted")]  # an infrastructure abort says nothing
    client = make_client(load_settings({"data_dir": str(tmp_path)}))
    try:
        client.insert("trajectories", [list(r.values()) for r in rows], column_names=list(rows[0]))
        client.insert("trajectories", [list(r.values()) for r in rows[-12:]], column_names=list(rows[0]))  # a replay
        got = client.query(last_n_success("pixel-r", WINDOW, steps=True))
    finally:
        client.close()
    assert list(got.column_names) == ["task_name", "episodes", "success_rate", "mean_steps"]
    assert [tuple(r) for r in got.result_rows] == [("games.2048", 5, 0.0, 300.0), ("games.mines", WINDOW, 0.3333, 4.0)]
