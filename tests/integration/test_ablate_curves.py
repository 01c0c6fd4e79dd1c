"""app.ablation.runs' curves (python -m benchmarks.ablate), in real embedded chDB: the run's curve windows every task's
episodes together, the per-task curves each task's own, both over the run's RL policy only."""

from __future__ import annotations


import pytest

from consumers.rows import rows_for
from infra.clickhouse.client import make_client
from infra.runtime.settings import load_settings
from schemas.events import TaskSpec, Trajectory

from app.ablation import runs as ablate

T0 = 1.8e9


def episode(k: int, policy: str, game: str, score: float) -> Trajectory:
    return Trajectory(episode_id=f"{policy}-{k}", task=TaskSpec(task_id=f"t-{k}", suite="games", name=game),
                      sandbox="s", worker_id="w", policy=policy, steps=[], status="ended", success=False,
                      started_at=T0 + k, ended_at=T0 + k + 1, score=score * 10, normalised_score=score)


def test_the_curves_window_the_runs_episodes_overall_and_per_task(tmp_path, monkeypatch):
    settings = load_settings({"data_dir": str(tmp_path)})
    # 30 snake episodes at 0.1 then 0.5 then 0.9 (windows of 10), 15 of 2048 at 0.3 (one whole
    # window), interleaved; 5 demonstrations of the annotator start the run 100 s earlier; another
    # run's episodes are not read
    snake = [episode(2 * k, "pixel-r", "games.snake", (0.1, 0.5, 0.9)[k // 10]) for k in range(30)]
    g2048 = [episode(2 * k + 1, "pixel-r", "games.2048", 0.3) for k in range(15)]
    demos = [episode(k - 100, "scripted-pixel-r", "games.snake", 1.0) for k in range(5)]
    other = [episode(k, "pixel-other", "games.snake", 0.0) for k in range(20)]
    rows = [r for t in snake + g2048 + demos + other for r in rows_for("trajectories", t)["trajectories"]]
    client = make_client(settings)
    try:
        client.insert("trajectories", [list(r.values()) for r in rows], column_names=list(rows[0]))
        monkeypatch.setattr(ablate, "WINDOW", 10)  # TASK_WINDOW is 10 already
        per_task = client.query(ablate.task_curve_sql("pixel-r", "normalised_score")).named_results()
        overall = client.query(ablate.curve_sql("pixel-r", "normalised_score")).named_results()
    finally:
        client.close()
    curves = ablate.task_curves([dict(r) for r in per_task])
    assert [c["normalised_score"] for c in curves["games.snake"]] == [0.1, 0.5, 0.9]
    assert [c["episodes"] for c in curves["games.snake"]] == [10, 20, 30]
    assert [c["normalised_score"] for c in curves["games.2048"]] == [0.3]  # its last 5 are no whole window
    assert ablate.TASK_WINDOW == 10
    # the last snake episode ends at T0 + 59 s, the annotator's first started at T0 - 100 s
    assert curves["games.snake"][-1]["seconds"] == 159.0
    # windows of 10 over both games in the order they ended: snake 0-4 and 2048 0-4, snake 5-9 and
    # 2048 5-9, snake 10-14 (0.5) and 2048 10-14, snake 15-24 (0.5, then 0.9); the last 5: no window
    overall = list(overall)
    assert [r["normalised_score"] for r in overall] == [0.2, 0.2, 0.4, 0.7]
    assert [r["episodes"] for r in overall] == [10, 20, 30, 40]


def test_the_critic_check_is_read_from_the_runs_trainer_metrics_through_flywheel_sql(tmp_path, monkeypatch):
    """ablate measures the critic at PPO's start from ClickHouse (as `flywheel sql` returns the
    rows: JSON, the metrics a map), so runs from before the pooled figures are measured alike."""
    from schemas.events import TrainerMetrics
    from trainer.core import metric_names as M

    def update(k: int, critic_only: bool, ev: float, corr: float, episodes: float) -> TrainerMetrics:
        return TrainerMetrics(run_id="r", update=k, policy=ablate.policy_of("full", 0),
                              policy_version=0 if critic_only else k, ts=T0 + k, metrics={M.CRITIC_ONLY: float(critic_only), M.EXPLAINED_VARIANCE: ev,
                                       M.REWARD_CORR: corr, M.EPISODES: episodes, M.STEPS: 1000.0})

    events = [update(1, True, 0.2, 0.5, 8.0), update(2, False, -4.0, 1.0, 2.0), update(3, False, 0.4, 0.8, 6.0),
              update(4, False, 0.6, 0.6, 6.0), update(5, False, 0.8, 0.4, 10.0)]
    rows = [r for e in events for r in rows_for("metrics", e)["trainer_metrics"]]
    client = make_client(load_settings({"data_dir": str(tmp_path)}))
    try:
        client.insert("trainer_metrics", [list(r.values()) for r in rows], column_names=list(rows[0]))
    finally:
        client.close()
    monkeypatch.setenv("FLYWHEEL_DATA_DIR", str(tmp_path))
    got = ablate.measure("full", 0, tmp_path / "out", 0.5)  # no run folder, no summary: ClickHouse alone
    assert got["ev_at_ppo_start"] == -4.0 and got["corr_at_ppo_start"] == 1.0 and got["episodes_at_ppo_start"] == 2.0
    assert got["ev_ppo_start_pooled"] == pytest.approx((-4.0 + 0.4 + 0.6) / 3)
    assert got["corr_ppo_start_pooled"] == pytest.approx(0.7)  # the two-episode batch's 1.0 counts for nothing
    assert got["ppo_start_episodes"] == 14.0
    # over every PPO update, the fourth (past the first batches' pool) included
    assert got["ev_ppo_phase"] == pytest.approx((-4.0 + 0.4 + 0.6 + 0.8) / 4)
    assert got["corr_ppo_phase"] == pytest.approx((0 * 1.0 + 4 * 0.8 + 4 * 0.6 + 8 * 0.4) / 16)
