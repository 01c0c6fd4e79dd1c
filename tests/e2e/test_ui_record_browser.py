"""The recorder (app.ui.record) against a real platform: Playwright plays the person in the
Annotate view served on a real broker, two demonstrations each of two multistep tasks with no
scripted solver. They land on flywheel.steps.v1 as ``human:<name>`` episodes whose steps are the
clicks the recorder made, the page scored them, and no scripted solver ran (the recorder's
modules import none, and producers.scripted.solve raises if anything calls it)."""

from __future__ import annotations

import ast
import inspect

import pytest

import app.ui.record as record_module
import app.ui.record_routines as routines_module
from app.ui.record import record
from infra.runtime.kafka_clients import read_to_end
from infra.runtime.topics import TOPICS, topic_name
from producers import scripted
from schemas.codec import decode
from schemas.events import EpisodeEvent
from tests.e2e.browser_support import require_chromium

TASKS = ["click-tab-2", "email-inbox-delete"]
NAME = "recorder-test"


def imported_modules(module) -> set[str]:
    tree = ast.parse(inspect.getsource(module))
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    return names | {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}


def test_the_recorders_modules_import_no_solver():
    for module in (record_module, routines_module):
        assert not any("scripted" in m for m in imported_modules(module)), module.__name__


def test_demonstrations_recorded_through_the_ui_land_as_human_episodes(settings, monkeypatch):
    require_chromium()

    def no_solver(*_args, **_kwargs):
        raise AssertionError("a scripted solver was called while recording")

    monkeypatch.setattr(scripted, "solve", no_solver)
    lines: list[str] = []
    recorded = record(settings, TASKS, 2, NAME, first_seed=7, say=lines.append)
    assert len(recorded) == 4 and len(lines) == 4
    for task in TASKS:
        assert any(r.success for r in recorded if r.task == task), lines

    events = [decode(r.value(), EpisodeEvent) for r in read_to_end(settings, topic_name(TOPICS.steps, settings))]
    for r in recorded:
        mine = [e for e in events if e.episode_id == r.episode_id]
        assert {e.policy for e in mine if e.kind in ("started", "step")} == {f"human:{NAME}"}
        steps = sorted((e for e in mine if e.kind == "step"), key=lambda e: e.step_index)
        clicks = [e.action for e in steps if e.action.type == "click"]
        assert len(clicks) == r.clicks == len(r.points)
        for action, (x, y) in zip(clicks, r.points):  # the clicks the recorder made, in the screen's pixels
            assert action.x * 160 == pytest.approx(x, abs=1.0) and action.y * 210 == pytest.approx(y, abs=1.0)
        ended = [e for e in mine if e.kind == "ended"]
        assert len(ended) == 1 and ended[0].success == r.success  # the page's verdict, as the view showed it
        assert not any(e.sampled for e in steps)
