"""The UI's reads: every statement passes the analyst SQL policy; hostile inputs are refused."""

from __future__ import annotations

import argparse
import logging

import pytest

from app.ui import queries
from app.ui.cli import PathAccessLogger, check_bind, token_for
from app.ui.queries import EpisodeFilter, UiInputError
from app.ui.replay import marker
from infra.clickhouse.sql_policy import check
from infra.runtime.errors import UserError

HOSTILE = ["x' OR 1=1 --", "../../etc/passwd", "a" * 129, "<script>alert(1)</script>", "ep\x00id", "é", " ", "a;b"]


def test_every_ui_statement_passes_the_sql_policy():
    statements = [sql for run in ("", "pixel-run1") for sql, _params in queries.run_queries(run).values()]
    statements.append(queries.episodes_sql(EpisodeFilter("click-button", "human:alice", 3, "failure"))[0])
    statements.append(queries.episode_steps_sql("ep-1")[0])
    statements.append(queries.episode_pairs_sql("ep-1")[0])
    for sql in statements:
        assert check(sql), sql


@pytest.mark.parametrize("value", HOSTILE)
def test_hostile_ids_are_refused_with_the_field_named(value):
    with pytest.raises(UiInputError, match="episode"):
        queries.episode_steps_sql(value)
    with pytest.raises(UiInputError, match="task"):
        EpisodeFilter.parse({"task": value})


def test_filter_values_travel_as_bind_parameters_only():
    sql, params = queries.episodes_sql(EpisodeFilter.parse(
        {"task": "click-button", "policy": "human:alice", "version": "7", "outcome": "success"}))
    assert "click-button" not in sql and "alice" not in sql
    assert params == {"task": "click-button", "policy": "human:alice", "version": 7, "success": True}


@pytest.mark.parametrize("params", [{"version": "-1"}, {"version": "1e9"}, {"version": "99999999999"},
                                    {"outcome": "maybe"}])
def test_bad_version_or_outcome_is_refused(params):
    with pytest.raises(UiInputError):
        EpisodeFilter.parse(params)


def test_marker_in_pixels_for_each_kind():
    assert marker('{"type":"click","x":0.5,"y":0.25}', 160, 200) == {"kind": "point", "x": 80.0, "y": 50.0,
                                                                      "label": "click"}
    drag = marker('{"type":"drag","x1":0,"y1":0,"x2":1,"y2":0.5}', 100, 100)
    assert (drag["kind"], drag["x2"], drag["y2"]) == ("drag", 100, 50)
    assert marker('{"type":"scroll","x":0.1,"y":0.1,"direction":"down"}', 10, 10)["label"] == "scroll down"
    assert marker('{"type":"type","content":"hi"}', 10, 10) == {"kind": "text", "label": "type 'hi'"}
    assert marker('{"type":"hotkey","key":"ctrl c"}', 10, 10)["label"] == "keys ctrl c"
    assert marker("not json", 10, 10)["kind"] == "none"
    assert marker('{"type":"click"}', 10, 10)["kind"] == "none"


def test_binding_beyond_loopback_needs_a_token():
    check_bind("127.0.0.1", "")
    check_bind("::1", "")
    with pytest.raises(UserError, match="token"):
        check_bind("0.0.0.0", "")
    check_bind("0.0.0.0", "t" * 16)


def test_the_cli_makes_a_token_unless_told_not_to_and_logs_no_query_string():
    made = token_for(argparse.Namespace(token="", no_token=False))
    assert len(made) >= 16 and made != token_for(argparse.Namespace(token="", no_token=False))
    assert token_for(argparse.Namespace(token="given-token-0123456", no_token=False)) == "given-token-0123456"
    assert token_for(argparse.Namespace(token="", no_token=True)) == ""
    with pytest.raises(UserError):
        token_for(argparse.Namespace(token="x" * 20, no_token=True))

    records = []
    logger = logging.getLogger("test-ui-access")
    logger.addHandler(type("H", (logging.Handler,), {"emit": lambda self, r: records.append(r.getMessage())})())
    logger.setLevel(logging.INFO)
    request = type("R", (), {"method": "GET", "path": "/blob/ab", "path_qs": "/blob/ab?token=secret"})()
    PathAccessLogger(logger, "").log(request, type("S", (), {"status": 200})(), 0.01)
    assert records and "secret" not in records[0] and "/blob/ab" in records[0]
