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
