"""A run rescored by another scorer (`flywheel rescore`) has two `scored` rows per episode; the
report's, the demo's and the UI's queries and the staleness view count each episode once, from the
scorer that scored it first (its run's stream processors), in real embedded chDB."""

from __future__ import annotations

from consumers.rows import rows_for
from app.demo_queries import staleness, success_by_version
from app.measures import phase_sql
from app.phases import count_scored
from app.ui.queries import run_queries
from infra.clickhouse.client import make_client
from infra.runtime.settings import load_settings
from schemas.events import ScoredTrajectory, TaskSpec, Trajectory

T0 = 1.8e9


def scored(k: int, policy: str, success: bool, scorer: str, at: float) -> ScoredTrajectory:
    traj = Trajectory(episode_id=f"{policy}-{k}", task=TaskSpec(task_id=f"a-{k}", suite="miniwob", name="a"),
                      sandbox="s", worker_id="w", policy=policy, steps=[], status="ended", success=success,
                      started_at=T0 + k, ended_at=T0 + k + 1)
    return ScoredTrajectory(trajectory=traj, scorer=scorer, scorer_version="1", reward=float(success),
                            components={}, verdict=int(success), rl_eligible=True, scored_at=at + k)


def insert(client, records: list[ScoredTrajectory]) -> None:
    rows = [r for s in records for r in rows_for("scored", s)["scored"]]
    client.insert("scored", [list(r.values()) for r in rows], column_names=list(rows[0]))


def test_a_rescore_by_another_scorer_counts_no_episode_twice(tmp_path):
    settings = load_settings({"data_dir": str(tmp_path)})
    # the run's own scorer: 10 episodes, 4 successes; a rescore an hour later, by a scorer whose
    # name sorts first, fails them all; the scripted annotator's 5 demonstrations, all successes,
    # rescored too; 2 more episodes only the newer scorer saw (the streams upgraded mid-run); another
    # run scored only by the rescorer keeps its rows in the every-run view
    own = [scored(k, "pixel-r", k < 4, "rule-v1", T0 + 10) for k in range(10)]
    demos = [scored(k, "scripted-pixel-r", True, "rule-v1", T0) for k in range(5)]
    rescore = [scored(k, p, False, "judge-v1", T0 + 3600) for p in ("pixel-r", "scripted-pixel-r")
               for k in range(10 if p == "pixel-r" else 5)]
    upgraded = [scored(k, "pixel-r", True, "judge-v1", T0 + 20) for k in (10, 11)]
    other = [scored(k, "pixel-other", True, "judge-v1", T0 + 20) for k in range(3)]
    client = make_client(settings)
    try:
        insert(client, rescore)  # inserted first: "first" is by scored_at, not by arrival
        insert(client, own + demos + upgraded + other)
        insert(client, own[:3])  # a replay of the run's own records after the rescore
        by_version = client.query(success_by_version("pixel-r")).result_rows
        phases = client.query(phase_sql("pixel-r", -1, True, False)).result_rows  # no steps: version 0, PPO's
        ui = client.query(*run_queries("pixel-r")["success_by_task"]).result_rows
        every_run = client.query(*run_queries("")["success_by_task"]).result_rows
        stale = client.query(staleness("pixel-r")).result_rows
    finally:
        client.close()
    assert [(r[0], r[1], r[2], r[3]) for r in by_version] == [("a", 0, 12, 0.5)]
    assert {r[1]: (r[2], r[3]) for r in phases} == {"1 demonstrations (scripted)": (5, 1.0), "3 PPO": (12, 0.5)}
    assert sum(r[2] for r in ui) == 17  # the run's 12 episodes and its 5 demonstrations
    assert sum(r[2] for r in every_run) == 20  # and the other run's 3, from the scorer that scored it
    assert [(r[0], r[1]) for r in stale] == [(0, 12)]
    assert count_scored(settings, "pixel-r") == 12


def test_a_database_from_before_gets_the_staleness_view_that_counts_an_episode_once(tmp_path, monkeypatch):
    from infra.clickhouse import client as clickhouse

    every = clickhouse.load_migrations()
    monkeypatch.setattr(clickhouse, "load_migrations", lambda: [m for m in every if m.version < 7])
    client = make_client(load_settings({"data_dir": str(tmp_path)}))
    try:
        insert(client, [scored(k, "pixel-r", True, s, T0 + 60 * i) for i, s in enumerate(("rule-v1", "judge-v1"))
                        for k in range(4)])
        before = client.query(staleness("pixel-r")).result_rows
        monkeypatch.setattr(clickhouse, "load_migrations", lambda: [m for m in every if m.version <= 7])
        assert clickhouse.migrate(client) == ["007_staleness_once.sql"]
        after = client.query(staleness("pixel-r")).result_rows
    finally:
        client.close()
    assert sum(r[1] for r in before) == 8  # 002's view: the rescored copies too
    assert [(r[0], r[1]) for r in after] == [(0, 4)]


def test_the_last_100_are_each_tasks_newest_episodes_counted_once(tmp_path):
    from app.measures import LAST_PHASE, last_sql
    from infra.clickhouse.query import execute

    settings = load_settings({"data_dir": str(tmp_path)})
    # task "a" (scored() names every task "a"): 130 episodes, the first 30 successes, the newest 100
    # failures; a rescore of all of them by another scorer, which the run's own scorer outranks;
    # a game's 3 episodes are read by their normalised score (the trajectories table), not success
    own = [scored(k, "pixel-r", k < 30, "rule-v1", T0 + 10) for k in range(130)]
    rescore = [scored(k, "pixel-r", True, "judge-v1", T0 + 3600) for k in range(130)]
    game = []
    for k, norm in zip(range(300, 303), (0.2, 0.5, 0.8)):
        g = scored(k, "pixel-r", False, "rule-v1", T0 + 10)
        traj = g.trajectory.model_copy(update={"task": TaskSpec(task_id=f"g-{k}", suite="games", name="games.x"),
                                               "score": 10.0 * norm, "normalised_score": norm})
        game.append(g.model_copy(update={"trajectory": traj}))
    client = make_client(settings)
    try:
        insert(client, own + rescore + game)
        rows = [rows_for("trajectories", g.trajectory)["trajectories"][0] for g in game]
        client.insert("trajectories", [list(r.values()) for r in rows], column_names=list(rows[0]))
    finally:
        client.close()
    # through the readonly SQL policy, as the report and `flywheel sql` run it
    _, got, _ = execute(settings, last_sql("pixel-r", -1))  # no steps: version 0, PPO's
    _, none, _ = execute(settings, last_sql("pixel-r", 0))  # version 0 is the starting policy's
    assert [(r[0], r[1], r[2], r[3]) for r in got] == [("a", LAST_PHASE, 100, 0.0), ("games.x", LAST_PHASE, 3, 0.5)]
    assert none == []
