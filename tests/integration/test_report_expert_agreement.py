"""The games tables' queries (app.demo_queries: game_phases, expert_agreement, printed by
benchmarks/games_table.py) in real embedded chDB: the policy's agreement with the solver's key
labels per bucket of versions, click labels left out; the normalised score per phase."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from consumers.rows import rows_for
from app.demo_queries import expert_agreement, game_phases
from infra.clickhouse.client import make_client
from infra.runtime.settings import load_settings
from schemas.actions import Click, Hotkey
from schemas.events import Step, TaskSpec, Trajectory
from tests.fakes.run import synthetic_run

T0 = 1.8e9
AT = datetime.fromtimestamp(T0, timezone.utc)


def _trajectory(eid: str, task: str, policy: str, norm: float) -> Trajectory:
    return Trajectory(episode_id=eid, task=TaskSpec(task_id=eid, suite="games", name=task), sandbox="s", worker_id="w",
                      policy=policy, steps=[], status="ended", end_reason="done", success=False, started_at=T0,
                      ended_at=T0 + 1, score=norm * 10, normalised_score=norm)


def _insert(client, table: str, rows: list[dict]) -> None:
    client.insert(table, [list(r.values()) for r in rows], column_names=list(rows[0]))


def test_agreement_counts_same_key_steps_per_version_bucket_and_leaves_clicks_out(tmp_path):
    step = next(e for e in synthetic_run(1, seed=4).episode_events if isinstance(e, Step))
    # (episode, version, pressed, label): snake v0-4 agrees on 1 of 2, v5-9 on 2 of 2; a step without a label is not counted
    plays = [("snake-a", 0, "left", "left"), ("snake-a", 1, "up", "left"), ("snake-b", 5, "down", "down"),
             ("snake-b", 7, "up", "up"), ("snake-b", 8, "up", None), ("mines-a", 0, None, "click")]
    steps = []
    for k, (eid, version, pressed, label) in enumerate(plays):
        action = Hotkey(key=pressed) if pressed else Click(x=0.5, y=0.5)
        expert = None if label is None else Click(x=0.1, y=0.1) if label == "click" else Hotkey(key=label)
        steps += rows_for("steps", step.model_copy(update={
            "episode_id": eid, "step_index": k, "policy": "pixel-r", "policy_version": version, "action": action,
            "expert_action": expert}))["steps"]
    trajectories = [r for eid, task in (("snake-a", "games.snake"), ("snake-b", "games.snake"), ("mines-a", "games.mines"))
                    for r in rows_for("trajectories", _trajectory(eid, task, "pixel-r", 0.1))["trajectories"]]
    client = make_client(load_settings({"data_dir": str(tmp_path)}))
    try:
        _insert(client, "steps", steps)
        _insert(client, "trajectories", trajectories)
        got = client.query(expert_agreement("pixel-r", bucket=5)).result_rows
    finally:
        client.close()
    assert got == [("games.snake", 0, 2, 0.5), ("games.snake", 5, 2, 1.0)]


def test_the_phases_table_splits_demonstrations_pi_sft_and_ppo_by_acting_version_once_per_episode(tmp_path):
    runs = [("d1", "scripted-pixel-r", 0, 1.0), ("d2", "scripted-pixel-r", 0, 0.5), ("p0", "pixel-r", 0, 0.2),
            ("p1", "pixel-r", 3, 0.4), ("p2", "pixel-r", 12, 0.6), ("o1", "pixel-other", 12, 0.9)]
    trajectories, scored = [], []
    for eid, policy, version, norm in runs:
        t = _trajectory(eid, "games.2048", policy, norm)
        trajectories += rows_for("trajectories", t)["trajectories"]
        scored.append({"event_id": eid, "episode_id": eid, "policy": policy, "policy_version_min": version,
                       "scorer": "rule-v1", "scored_at": AT, "infra_failure": False})
    # a rescore of p2 by a newer scorer adds a row beside the first: the episode still counts once
    scored.append({**scored[-2], "scorer": "rule-v2", "scored_at": AT + timedelta(minutes=1)})
    # an infrastructure failure is left out
    trajectories += rows_for("trajectories", _trajectory("x1", "games.2048", "pixel-r", -1.0))["trajectories"]
    scored.append({"event_id": "x1", "episode_id": "x1", "policy": "pixel-r", "policy_version_min": 12,
                   "scorer": "rule-v1", "scored_at": AT, "infra_failure": True})
    client = make_client(load_settings({"data_dir": str(tmp_path)}))
    try:
        _insert(client, "trajectories", trajectories)
        _insert(client, "scored", scored)
        got = client.query(game_phases("pixel-r", "scripted-pixel-r", split=10)).result_rows
    finally:
        client.close()
    assert [(r[1], r[2], r[3]) for r in got] == [("0 demonstrations", 2, 0.75), ("1 pi_sft (v0)", 1, 0.2),
                                                ("2 PPO v1-10", 1, 0.4), ("3 PPO v11+", 1, 0.6)]
