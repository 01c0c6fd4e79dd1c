"""The report's games section: asked of ClickHouse once, and only a run with games has one."""

from __future__ import annotations

from app import demo_queries as Q
from app import report
from app.report import RunInfo, bucket_seconds, write_report

RUN = RunInfo(run_id="r1", policy="pixel-r", mode="async", started_at=0.0, ended_at=600.0)
GAMES_SQL = Q.game_scores_over_time(RUN.policy, bucket_seconds(600.0), 0.0)


def write(monkeypatch, tmp_path, game_rows: list[tuple]) -> tuple[str, list[str]]:
    asked: list[str] = []

    def query(settings, sql):
        asked.append(sql)
        return (["game", "minute", "episodes", "mean_score", "mean_normalised_score"],
                game_rows if sql == GAMES_SQL else [])

    monkeypatch.setattr(report, "query", query)
    monkeypatch.setattr(report, "plot_game_scores", lambda rows, path, bucket_s: path.name)
    return write_report(None, RUN, tmp_path).read_text(), asked


def test_a_games_run_asks_for_its_scores_once_and_shows_them(monkeypatch, tmp_path):
    text, asked = write(monkeypatch, tmp_path, [("2048", 1.0, 3, 512.0, 0.8)])
    assert asked.count(GAMES_SQL) == 1
    assert "## Games: normalised score over wall-clock" in text and "game_scores.png" in text
    assert "0.8" in text


def test_a_run_without_games_has_no_games_section(monkeypatch, tmp_path):
    text, asked = write(monkeypatch, tmp_path, [])
    assert asked.count(GAMES_SQL) == 1
    assert "Games" not in text


def test_before_and_after_shows_a_games_normalised_score_and_a_tasks_success(monkeypatch, tmp_path):
    rows = {Q.first_n_success(RUN.policy): [("games.snake", 100, 0.0), ("click-test", 100, 0.5)],
            Q.last_n_success(RUN.policy): [("games.snake", 100, 0.01), ("click-test", 100, 0.9)],
            Q.last_n_scores(RUN.policy, first=True): [("games.snake", 100, 0.0412)],
            Q.last_n_scores(RUN.policy): [("games.snake", 100, 0.1533)]}
    monkeypatch.setattr(report, "query", lambda settings, sql: (["task", "episodes", "m"], rows.get(sql, [])))
    monkeypatch.setattr(report, "plot_game_scores", lambda rows, path, bucket_s: path.name)
    text = write_report(None, RUN, tmp_path).read_text()
    assert "| games.snake | - | 0.0412 | 0.1533 | 100 |" in text  # not success, reaching the heuristic's mean
    assert "| 0.5 | 0.9 | 100 |" in text  # click-test: its success
    import json

    assert json.loads((tmp_path / "summary.json").read_text())["after"] == {"games.snake": 0.1533, "click-test": 0.9}


def test_each_of_up_to_forty_curves_has_a_look_of_its_own_and_a_plot_of_eleven_tasks_shows_them(tmp_path, monkeypatch):
    looks = [tuple(report.curve_style(k).values()) for k in range(40)]
    assert len(set(looks)) == 40
    assert looks[0][0] == looks[10][0] and looks[0] != looks[10]  # a colour comes back, drawn otherwise
    rows = [(f"task-{t:02d}", m, 10, 0.1 * t / 2) for t in range(11) for m in (1.0, 2.0)]
    drawn = {}
    monkeypatch.setattr(report.plt, "close", lambda fig: drawn.update(
        (ln.get_label(), (ln.get_color(), ln.get_linestyle())) for ln in fig.axes[0].lines))
    report.plot_learning_curve(rows, tmp_path / "curve.png", 30)
    assert (tmp_path / "curve.png").exists()
    assert len(drawn) == 11 and len(set(drawn.values())) == 11
