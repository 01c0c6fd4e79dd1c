"""The report's "Episodes per task" says how each task's episodes ended (done, out of steps, out
of time) in real embedded chDB: an episode cut by the wall-clock limit shows, as the games'
long episodes were before their limit followed their step budget."""

from __future__ import annotations

from consumers.rows import rows_for
from app.demo_queries import totals
from infra.clickhouse.client import make_client
from infra.runtime.settings import load_settings
from schemas.events import TaskSpec, Trajectory

T0 = 1.8e9


def trajectory(k: int, task: str, status: str, reason: str, policy: str = "pixel-r") -> Trajectory:
    return Trajectory(episode_id=f"{policy}-{task}-{k}", task=TaskSpec(task_id=f"{task}-{k}", suite="games", name=task),
                      sandbox="s", worker_id="w", policy=policy, steps=[], status=status, end_reason=reason,
                      success=reason == "done", started_at=T0 + k, ended_at=T0 + k + 1)


def test_the_episodes_table_counts_how_each_task_ended(tmp_path):
    records = ([trajectory(k, "games.2048", "ended", r) for k, r in enumerate(["done", "timeout", "timeout",
                                                                              "step_budget"])]
               + [trajectory(9, "games.2048", "aborted", "sandbox crashed")]
               + [trajectory(k, "games.snake", "ended", "done") for k in range(3)]
               + [trajectory(0, "games.snake", "ended", "timeout", policy="pixel-other")])
    client = make_client(load_settings({"data_dir": str(tmp_path)}))
    try:
        rows = [r for t in records for r in rows_for("trajectories", t)["trajectories"]]
        client.insert("trajectories", [list(r.values()) for r in rows], column_names=list(rows[0]))
        result = client.query(totals("pixel-r"))
    finally:
        client.close()
    got = {r[0]: dict(zip(result.column_names[1:], r[1:])) for r in result.result_rows}
    assert {t: (c["episodes"], c["aborted"], c["ended_done"], c["out_of_steps"], c["out_of_time"])
            for t, c in got.items()} == {"games.2048": (5, 1, 1, 1, 2), "games.snake": (3, 0, 3, 0, 0)}
