"""app.ablation.verifier_figure (`python -m benchmarks.verifier_rl_figure`): the per-task curves it
reads from the log's windows, and the figure it draws from them. A stand-in client hands back the rows ClickHouse would: the query itself ran on
a real log for docs/verifier-rl/by_task.png."""

from __future__ import annotations

from types import SimpleNamespace

from app.ablation import verifier_figure as fig


class _Client:
    def __init__(self, rows_by_policy):
        self.rows, self.asked = rows_by_policy, []

    def query(self, sql, parameters):
        self.asked.append(parameters)
        return SimpleNamespace(result_rows=self.rows.get(parameters["p"], []))

    def close(self):
        pass


ROWS = {"pixel-v": [("click-tab", 0, 10, 0.1, 0.9), ("click-tab", 2, 5, 0.2, 1.0), ("focus-text", 1, 8, 0.5, 0.5)]}


def test_curves_read_the_named_column_at_each_windows_midpoint():
    client = _Client(ROWS)
    page = fig.curves(client, "pixel-v", "page")
    verdict = fig.curves(client, "pixel-v", "verdict")
    assert client.asked == [{"w": fig.WINDOW_S, "p": "pixel-v"}] * 2
    assert [c["seconds"] for c in page["click-tab"]] == [0.5 * fig.WINDOW_S, 2.5 * fig.WINDOW_S]  # a gap stays a gap
    assert [c["success_rate"] for c in page["click-tab"]] == [0.1, 0.2]
    assert [c["success_rate"] for c in verdict["click-tab"]] == [0.9, 1.0]
    assert fig.curves(client, "pixel-absent", "page") == {}


def test_the_figure_draws_every_task_and_names_runs_absent_from_the_log(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(fig, "query_client", lambda settings: (_Client(ROWS | {"pixel-p": ROWS["pixel-v"][:1]}), None))
    out = tmp_path / "by_task.png"
    fig.main(["--page", "p,gone", "--verifier", "v,lost", "--out", str(out)])
    printed = capsys.readouterr().out
    assert "no episode of pixel-gone in this log" in printed and "no episode of pixel-lost in this log" in printed
    assert printed.count("no episode of") == 2  # a verifier run's two results: named once
    assert f"{out}: 2 tasks" in printed and out.stat().st_size > 0
