"""v_game_scores (migration 006) on embedded chDB: per game, policy version and minute, the mean
final and normalised score of the games' trajectories, each counted once; other tasks and infra
failures left out; a database from before the migration gains the columns with NULL."""

from __future__ import annotations

import random
from collections import defaultdict
from contextlib import contextmanager

from consumers.rows import rows_for
from tests.fakes.run import T0, synthetic_run
from infra.clickhouse import client as clickhouse
from infra.clickhouse.client import make_client, migrate
from infra.runtime.settings import load_settings
from schemas.events import Trajectory


@contextmanager
def chdb(tmp_path):
    client = make_client(load_settings({"data_dir": str(tmp_path)}))
    try:
        yield client
    finally:
        client.close()  # one chDB engine per process: release it for the next test's directory


def insert(client, trajectories: list[Trajectory]) -> None:
    rows = [r for t in trajectories for r in rows_for("trajectories", t)["trajectories"]]
    client.insert("trajectories", [list(r.values()) for r in rows], column_names=list(rows[0]))


def game_trajectory(base: Trajectory, i: int, game: str, version: int, minute: int, score: float,
                    infra_failure: bool = False) -> Trajectory:
    """``base`` as an episode of ``game`` played by ``version``, ended ``minute`` minutes after T0."""
    steps = [s.model_copy(update={"policy_version": version}) for s in base.steps]
    ended = T0 + 60.0 * minute + 7.0
    return base.model_copy(update={
        "episode_id": f"game-{i}", "task": base.task.model_copy(update={"suite": "games", "name": game}),
        "steps": steps, "score": score, "normalised_score": score / 10.0, "infra_failure": infra_failure,
        "started_at": ended - 5.0, "ended_at": ended})


def test_game_score_curves_per_game_version_and_minute(tmp_path):
    base = [t for t in synthetic_run(6, seed=4).trajectories if t.steps]
    rng = random.Random(0)
    games, expected = [], defaultdict(list)
    for i in range(40):
        game, version, minute = rng.choice(["games.2048", "games.snake"]), rng.randint(0, 1), rng.randint(0, 2)
        score = float(rng.randint(0, 40))
        games.append(game_trajectory(base[i % len(base)], i, game, version, minute, score))
        expected[(game, version, minute)].append(score)
    left_out = [game_trajectory(base[0], 99, "games.snake", 0, 0, 1000.0, infra_failure=True)]
    with chdb(tmp_path) as client:
        insert(client, games + left_out + base)
        insert(client, games[:10])  # a replay: FINAL counts each episode once
        got = client.query("SELECT game, policy_version, toUnixTimestamp(minute), episodes, mean_score, "
                           "mean_normalised_score FROM v_game_scores").result_rows
    want = []
    for (game, version, minute), scores in sorted(expected.items()):
        mean = sum(scores) / len(scores)
        want.append((game, version, int(T0 // 60 * 60 + 60 * minute), len(scores), round(mean, 4),
                     round(mean / 10.0, 4)))
    assert [(g, v, m, n, s, ns) for g, v, m, n, s, ns in got] == want
    assert sum(n for _, _, _, n, _, _ in got) == 40


def test_a_trajectories_table_from_before_gains_the_scores_as_null(tmp_path, monkeypatch):
    old = [t for t in synthetic_run(3, seed=4).trajectories if t.steps][0]
    every = clickhouse.load_migrations()
    monkeypatch.setattr(clickhouse, "load_migrations", lambda: [m for m in every if m.version < 6])
    with chdb(tmp_path) as client:
        row = {c: v for c, v in rows_for("trajectories", old)["trajectories"][0].items()
               if c not in ("score", "normalised_score")}
        client.insert("trajectories", [list(row.values())], column_names=list(row))
        monkeypatch.setattr(clickhouse, "load_migrations", lambda: [m for m in every if m.version <= 6])
        assert migrate(client) == ["006_game_scores.sql"] and migrate(client) == []
        insert(client, [game_trajectory(old, 1, "games.mines", 3, 0, 12.0)])
        got = client.query("SELECT episode_id, score, normalised_score FROM trajectories FINAL ORDER BY episode_id").result_rows
        assert got == [(old.episode_id, None, None), ("game-1", 12.0, 1.2)]
        assert client.query("SELECT game, policy_version, episodes, mean_score FROM v_game_scores").result_rows == \
            [("games.mines", 3, 1, 12.0)]
