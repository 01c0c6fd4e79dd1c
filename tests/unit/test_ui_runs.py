"""The run filter (hostile values refused with the field named, the run's rows selected by bind
parameters only) and the page's Plotly.js, served from the plotly package without the token."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp.test_utils import TestClient, TestServer

from app.ui import queries
from app.ui.queries import EpisodeFilter, UiInputError
from app.ui.server import make_app
from infra.runtime.settings import load_settings

HOSTILE = ["x' OR 1=1 --", "../../etc/passwd", "a" * 129, "<script>", "run\x00", " ", "a;b"]


@pytest.mark.parametrize("value", HOSTILE)
def test_a_hostile_run_is_refused_with_the_field_named(value):
    with pytest.raises(UiInputError, match="^run: "):
        EpisodeFilter.parse({"run": value})
    with pytest.raises(UiInputError, match="^run: "):
        queries.run_queries(value)


def test_a_run_is_its_policy_and_its_scripted_annotator_bound_as_parameters():
    sql, params = queries.episodes_sql(EpisodeFilter.parse({"run": "pixel-20261127-0323-ab12", "task": "click-test"}))
    assert "pixel-2026" not in sql and "policy IN ({run:String}, {run_annotator:String})" in sql
    assert params == {"run": "pixel-20261127-0323-ab12", "run_annotator": "scripted-pixel-20261127-0323-ab12",
                      "task": "click-test"}
    for sql, params in queries.run_queries("pixel-r1").values():
        assert "{where}" not in sql and "pixel-r1" not in sql
        assert params in ({"run": "pixel-r1", "run_annotator": "scripted-pixel-r1"}, {})
    assert all(params == {} and "{run:String}" not in sql for sql, params in queries.run_queries("").values())


def test_runs_fold_the_scripted_annotator_into_its_run_newest_first():
    rows = [{"policy": "scripted-pixel-a", "episodes": 20, "first_ms": 100},
            {"policy": "pixel-a", "episodes": 50, "first_ms": 200},
            {"policy": "pixel-b", "episodes": 3, "first_ms": 900},
            {"policy": "scripted-", "episodes": 1, "first_ms": 50}]
    assert queries.runs_of(rows) == [{"run": "pixel-b", "episodes": 3, "first_ms": 900},
                                     {"run": "pixel-a", "episodes": 70, "first_ms": 100},
                                     {"run": "scripted-", "episodes": 1, "first_ms": 50}]


def test_the_page_gets_plotly_js_from_the_installed_package_without_the_token():
    async def go():
        async with TestClient(TestServer(make_app(load_settings({}), "t" * 24))) as client:
            js = await client.get("/plotly.min.js")
            assert (await client.get("/charts.js")).status == 200
            run = await client.get("/api/run?run=x'")
            hostile = await client.get("/api/run?run=x'", headers={"X-Flywheel-Token": "t" * 24})
            return (js.status, js.content_type, js.headers.get("Cache-Control"), await js.read(), run.status,
                    hostile.status, await hostile.text())

    status, content_type, cache, body, data_status, hostile_status, hostile = asyncio.run(go())
    assert (status, content_type.endswith("javascript"), data_status) == (200, True, 401)
    assert hostile_status == 400 and hostile.startswith("flywheel ui: run: "), hostile
    assert "max-age" in cache and len(body) > 1_000_000 and b"plotly" in body[:2000].lower()
