"""The report's suite mean over time, computed by real embedded chDB: at each moment, the mean over
tasks of each task's last 100 episodes ended by then, and when it first reached a target."""

from __future__ import annotations

from consumers.rows import rows_for
from app.demo_queries import suite_mean_over_time
from app.report import suite_mean_reached
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
    from app.demo_queries import success_over_time
    from app.report import as_minutes

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


def test_a_games_run_reports_normalised_score_per_game_over_minutes(tmp_path):
    """Issue 31: the report's games section, from trajectories' score columns on chDB: per game and
    minute since the start, mean score and normalised score; a replayed row counted once, other
    policies, other suites and infrastructure failures left out."""
    from app.demo_queries import game_scores_over_time, last_n_scores
    from app.report import plot_game_scores

    def game(k, name, minute, score, normalised, policy="pixel-r", suite="games", infra=False):
        t = trajectory(k, name, T0 + 60 * minute + 5, normalised >= 1.0, policy)
        return t.model_copy(update={"task": TaskSpec(task_id=f"{name}-{k}", suite=suite, name=name), "score": score,
                                    "normalised_score": normalised, "infra_failure": infra})

    trajs = [game(0, "games.snake", 0, 2.0, 0.1), game(1, "games.snake", 0, 4.0, 0.3), game(2, "games.snake", 1, 9.0, 0.8),
             game(3, "games.mines", 1, 40.0, 0.9), game(4, "games.mines", 1, 0.0, -0.1, infra=True),
             game(5, "games.snake", 1, 50.0, 5.0, policy="pixel-other"), game(6, "click-test", 0, 1.0, 1.0, suite="miniwob")]
    rows = [r for t in trajs for r in rows_for("trajectories", t)["trajectories"]]
    client = make_client(load_settings({"data_dir": str(tmp_path)}))
    try:
        client.insert("trajectories", [list(r.values()) for r in rows], column_names=list(rows[0]))
        client.insert("trajectories", [list(r.values()) for r in rows[:1]], column_names=list(rows[0]))  # a replay
        got = client.query(game_scores_over_time("pixel-r", 60, T0)).result_rows
        progress = {r[0]: tuple(r[1:]) for r in client.query(last_n_scores("pixel-r")).result_rows}
    finally:
        client.close()
    assert [tuple(r) for r in got] == [("games.mines", 1.0, 1, 40.0, 0.9), ("games.snake", 0.0, 2, 3.0, 0.2),
                                        ("games.snake", 1.0, 1, 9.0, 0.8)]
    assert progress["games.snake"] == (3, 0.4)  # the demo's progress figure for a game: replay counted once
    assert (tmp_path / plot_game_scores(got, tmp_path / "games.png", 60)).stat().st_size > 0


def test_the_learning_curve_plots_a_games_normalised_score_and_a_tasks_success(tmp_path):
    """Issue 56: on chDB, the learning curve's cell for a game is its mean normalised score (not its
    success, 0 or 1), a MiniWoB++ task's its success, each row saying which it measures."""
    from app.demo_queries import success_over_time
    from app.report import curve_measure, plot_learning_curve

    def game(k, minute, normalised):
        t = trajectory(k, "games.snake", T0 + 60 * minute + 5, normalised >= 1.0)
        return t.model_copy(update={"task": TaskSpec(task_id=f"games.snake-{k}", suite="games", name="games.snake"),
                                    "score": 3.0, "normalised_score": normalised})

    trajs = [game(0, 0, 0.2), game(1, 0, 0.4), trajectory(2, "a", T0 + 5, True), trajectory(3, "a", T0 + 6, False)]
    rows = [r for t in trajs for r in rows_for("trajectories", t)["trajectories"]]
    client = make_client(load_settings({"data_dir": str(tmp_path)}))
    try:
        client.insert("trajectories", [list(r.values()) for r in rows], column_names=list(rows[0]))
        got = [tuple(r) for r in client.query(success_over_time("pixel-r", 60, T0)).result_rows]
    finally:
        client.close()
    assert got == [("a", 0.0, 2, 0.5, "success"), ("games.snake", 0.0, 2, 0.3, "normalised score")]
    assert curve_measure(got) == "success, a game's normalised score"
    assert curve_measure(got[1:]) == "normalised score"
    assert (tmp_path / plot_learning_curve(got, tmp_path / "curve.png", 60)).stat().st_size > 0
