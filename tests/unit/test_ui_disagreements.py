"""The Disagreements view's reads and shaping: statements pass the analyst SQL policy, input only
as bind parameters, hostile values refused, the confusion table and episode rows shaped."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp.test_utils import TestClient, TestServer

from app.ui.disagreements import DisagreementFilter, confusion_row, confusion_sql, episodes_sql, view
from app.ui.queries import MAX_EPISODES, UiInputError
from app.ui.server import SECURITY_HEADERS, make_app
from infra.clickhouse.sql_policy import check
from infra.runtime.settings import load_settings

HOSTILE = ["x' OR 1=1 --", "../../etc/passwd", "a" * 129, "<script>", "ep\x00id", "é", " ", "a;b"]


def test_every_statement_passes_the_sql_policy():
    for f in (DisagreementFilter(), DisagreementFilter("pixel-r1", "click-button", "false_positive"),
              DisagreementFilter("pixel-r1", "", "false_negative")):
        for sql, _params in (confusion_sql(f), episodes_sql(f)):
            assert check(sql), sql


def test_values_travel_as_bind_parameters_only():
    f = DisagreementFilter.parse({"run": "pixel-r1", "task": "click-button", "kind": "false_positive"})
    sql, params = episodes_sql(f)
    assert "pixel-r1" not in sql and "click-button" not in sql
    assert params == {"run": "pixel-r1", "run_annotator": "scripted-pixel-r1", "task": "click-button"}
    assert "verdict = 1 AND NOT success" in sql and "judge_outcome" in sql
    sql, params = confusion_sql(f)
    assert "pixel-r1" not in sql and "task" not in params  # the counts cover every task of the run


def test_no_run_reads_every_run_and_the_kind_chooses_the_direction():
    sql, params = episodes_sql(DisagreementFilter.parse({}))
    assert params == {} and "verdict != toUInt8(success)" in sql
    assert "verdict = 0 AND success" in episodes_sql(DisagreementFilter(kind="false_negative"))[0]


@pytest.mark.parametrize("value", HOSTILE)
def test_hostile_values_are_refused_with_the_field_named(value):
    for field in ("run", "task", "kind"):
        with pytest.raises(UiInputError, match=field):
            DisagreementFilter.parse({field: value})


def test_confusion_row_rates_and_their_absence():
    row = confusion_row({"task_name": "click-button", "judged": 10, "tp": 4, "fp": 1, "tn": 3, "fn": 2})
    assert row == {"task_name": "click-button", "judged": 10, "tp": 4, "fp": 1, "tn": 3, "fn": 2,
                   "false_positive_rate": 0.25, "recall": 0.6667}
    none = confusion_row({"task_name": "t", "tp": 0, "fp": 0, "tn": 0, "fn": 5})
    assert none["false_positive_rate"] is None and none["recall"] == 0.0


def test_view_totals_the_tasks_and_says_when_no_verifier_decided():
    confusion = [{"task_name": "a", "tp": 1, "fp": 2, "tn": 3, "fn": 0},
                 {"task_name": "b", "tp": 0, "fp": 0, "tn": 1, "fn": 1}]
    episodes = [{"episode_id": "e1", "page_success": 0, "verifier_success": 1}]
    out = view(confusion, episodes)
    assert out["verifier_used"] and [t["task_name"] for t in out["tasks"]] == ["a", "b"]
    assert out["total"] == {"task_name": "ALL", "judged": 8, "tp": 1, "fp": 2, "tn": 4, "fn": 1,
                            "false_positive_rate": 0.3333, "recall": 0.5}
    assert out["episodes"] == [{"episode_id": "e1", "page_success": False, "verifier_success": True}]
    assert not out["truncated"]
    empty = view([], [])
    assert not empty["verifier_used"] and empty["tasks"] == [] and empty["total"]["judged"] == 0
    assert view(confusion, episodes * MAX_EPISODES)["truncated"]


def test_the_route_needs_the_token_refuses_bad_input_before_any_read_and_serves_its_script(tmp_path):
    """Its script holds no data (served without the token, like the page's others); its JSON
    needs the token; a bad kind is a 400 naming it before ClickHouse is asked (none exists here)."""
    token = "t" * 24

    async def go():
        app = make_app(load_settings({"data_dir": str(tmp_path)}), token, open_chdb=False)
        async with TestClient(TestServer(app)) as client:
            script = await client.get("/disagree.js")
            bare = await client.get("/api/disagreements")
            bad = await client.get("/api/disagreements?kind=x", headers={"X-Flywheel-Token": token})
            return (script.status, bare.status, bad.status, await bad.text(),
                    all(bad.headers.get(k) == v for k, v in SECURITY_HEADERS.items()))

    script, bare, bad, text, headed = asyncio.run(go())
    assert (script, bare, bad) == (200, 401, 400) and text.startswith("flywheel ui: kind") and headed
