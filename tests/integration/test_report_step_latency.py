"""The report's per-step latency breakdown, computed by real embedded chDB from the steps table:
policy and environment quantiles, the rest of each step and the gap between an episode's steps."""

from __future__ import annotations

from consumers.rows import rows_for
from app.demo_queries import step_latency
from infra.clickhouse.client import make_client
from infra.runtime.settings import load_settings
from schemas.actions import Click
from schemas.events import BlobRef, Observation, Step

T0 = 1.8e9


def step(episode: str, i: int, started: float, policy_ms: float, env_ms: float, took_ms: float,
         policy: str = "pixel-r") -> Step:
    obs = Observation(screenshot=BlobRef(sha256=f"{i:064x}", uri="file:///b"), screen_width=160, screen_height=210)
    return Step(episode_id=episode, ts=started + took_ms / 1000, step_index=i, started_at=started, observation=obs,
                action=Click(x=0.5, y=0.5), policy=policy, policy_version=0, logprob=-1.0,
                latency_policy_ms=policy_ms, latency_env_ms=env_ms)


def test_step_latency_splits_each_steps_wall_clock_and_the_gaps_between_steps(tmp_path):
    # episode a: steps of 100 + 200 ms taking 310 ms, 20 ms apart; episode b: one step of 300 + 100 in 400;
    # another policy's slow steps must not count
    steps = [step("a", 0, T0, 100, 200, 310), step("a", 1, T0 + 0.33, 100, 200, 310),
             step("b", 0, T0 + 5, 300, 100, 400), step("c", 0, T0, 9000, 9000, 18000, policy="other")]
    rows = [r for s in steps for r in rows_for("steps", s)["steps"]]
    client = make_client(load_settings({"data_dir": str(tmp_path)}))
    try:
        client.insert("steps", [list(r.values()) for r in rows], column_names=list(rows[0]))
        client.insert("steps", [list(r.values()) for r in rows[:2]], column_names=list(rows[0]))  # a replay
        result = client.query(step_latency("pixel-r"))
        got = dict(zip(result.column_names, result.result_rows[0]))
    finally:
        client.close()
    assert got["steps"] == 3
    assert (got["policy_mean_ms"], got["env_mean_ms"]) == (167, 167)
    assert got["rest_of_step_mean_ms"] == 7  # (10 + 10 + 0) / 3
    assert got["between_steps_mean_ms"] == 20  # a's second step started 20 ms after its first ended


def test_step_cost_by_task_reads_each_tasks_env_latency_against_the_pooled_one(tmp_path):
    from app.demo_queries import step_cost_by_task
    from schemas.actions import Type
    from schemas.events import TaskSpec, Trajectory

    def traj(episode: str, task: str, steps: list[Step], policy: str = "pixel-r") -> Trajectory:
        return Trajectory(episode_id=episode, task=TaskSpec(task_id=f"{task}.0", suite="miniwob", name=task),
                          sandbox="browser", worker_id="w", policy=policy, steps=steps, status="ended",
                          success=False, started_at=T0, ended_at=T0 + 1)

    slow = [step("s", i, T0 + i, 50, 800, 900) for i in range(3)]
    slow[2] = slow[2].model_copy(update={"action": Type(content="x"), "latency_env_ms": 200.0})  # a key press: cheaper
    fast = [step("f", i, T0 + i, 50, 200, 300) for i in range(3)]
    other = [step("o", 0, T0, 9000, 9000, 18000, policy="other")]
    in_flight = [step("g", 0, T0, 50, 5000, 5100)]  # no trajectory yet: left out
    client = make_client(load_settings({"data_dir": str(tmp_path)}))
    try:
        for s in [*slow, *fast, *other, *in_flight]:
            for table, rows in rows_for("steps", s).items():
                client.insert(table, [list(r.values()) for r in rows], column_names=list(rows[0]))
        for t in [traj("s", "click-slow", slow), traj("f", "click-fast", fast), traj("o", "click-slow", other, "other")]:
            for table, rows in rows_for("trajectories", t).items():
                client.insert(table, [list(r.values()) for r in rows], column_names=list(rows[0]))
        result = client.query(step_cost_by_task("pixel-r"))
        got = {r[0]: dict(zip(result.column_names, r)) for r in result.result_rows}
    finally:
        client.close()
    assert list(got) == ["click-slow", "click-fast"]  # the costliest first
    assert (got["click-slow"]["steps"], got["click-slow"]["env_p50_ms"], got["click-slow"]["env_p50_clicks_ms"]) == (3, 800, 800)
    assert (got["click-fast"]["steps"], got["click-fast"]["env_p50_ms"]) == (3, 200)
    # pooled env p50 over the six steps with a trajectory: 200 (four at 200, two at 800) -> 4.0 and 1.0
    assert (got["click-slow"]["env_p50_over_all_tasks"], got["click-fast"]["env_p50_over_all_tasks"]) == (4.0, 1.0)
