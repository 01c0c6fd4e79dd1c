"""The Annotate view's writes: actions parsed into the unified action space, hostile fields
refused with the field named, same-origin and token checks, bounded bodies (no broker, no browser)."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp.test_utils import TestClient, TestServer

from app.ui.annotate_input import MAX_TYPED, parse_action, parse_session
from app.ui.queries import UiInputError
from app.ui.server import make_app
from infra.runtime.settings import load_settings


def test_pointer_positions_become_normalised_actions():
    action, thought = parse_action({"type": "click", "x": 40, "y": 105, "thought": "the button"}, 160, 210)
    assert (action.type, action.x, action.y, thought) == ("click", 0.25, 0.5, "the button")
    scroll, _ = parse_action({"type": "scroll", "x": 0, "y": 210, "direction": "down"}, 160, 210)
    assert (scroll.x, scroll.y, scroll.direction) == (0.0, 1.0, "down")
    drag, _ = parse_action({"type": "drag", "x1": 16, "y1": 21, "x2": 160, "y2": 0}, 160, 210)
    assert (drag.x1, drag.y1, drag.x2, drag.y2) == (0.1, 0.1, 1.0, 0.0)
    assert parse_action({"type": "type", "text": "Hello"}, 160, 210)[0].content == "Hello"
    assert parse_action({"type": "hotkey", "key": "ctrl a"}, 160, 210)[0].key == "ctrl a"
    assert parse_action({"type": "finished"}, 160, 210)[0].type == "finished"


@pytest.mark.parametrize("body,field", [
    ({"type": "click", "x": 161, "y": 5}, "x"),
    ({"type": "click", "x": 5, "y": -1}, "y"),
    ({"type": "click", "x": float("nan"), "y": 5}, "x"),
    ({"type": "click", "x": "5", "y": 5}, "x"),
    ({"type": "click", "x": True, "y": 5}, "x"),
    ({"type": "click", "y": 5}, "x"),
    ({"type": "drag", "x1": 1, "y1": 1, "x2": 1e9, "y2": 1}, "x2"),
    ({"type": "scroll", "x": 5, "y": 5, "direction": "sideways"}, "direction"),
    ({"type": "type", "text": "a" * (MAX_TYPED + 1)}, "text"),
    ({"type": "type", "text": ""}, "text"),
    ({"type": "type", "text": ["a"]}, "text"),
    ({"type": "type", "text": "a\x00b"}, "text"),
    ({"type": "hotkey", "key": "hyperspace"}, "key"),
    ({"type": "hotkey", "key": "a" * 65}, "key"),
    ({"type": "shell", "command": "rm -rf /"}, "type"),
    ({"type": "click", "x": 1, "y": 1, "thought": "t" * 2001}, "thought"),
])
def test_hostile_actions_are_refused_naming_the_field(body, field):
    with pytest.raises(UiInputError, match=f"^{field}:"):
        parse_action(body, 160, 210)


@pytest.mark.parametrize("body,field", [
    ({"task": "no-such-task", "seed": 0, "name": "alice"}, "task"),
    ({"task": "x' OR 1=1 --", "seed": 0, "name": "alice"}, "task"),
    ({"task": "", "seed": 0, "name": "alice"}, "task"),
    ({"task": "click-test", "seed": -3, "name": "alice"}, "seed"),
    ({"task": "click-test", "seed": "1e99", "name": "alice"}, "seed"),
    ({"task": "click-test", "seed": 0, "name": "<script>"}, "name"),
    ({"task": "click-test", "seed": 0}, "name"),
    ({"task": "click-test", "seed": 0, "name": "a" * 300}, "name"),
    ([1, 2], "body"),
])
def test_hostile_sessions_are_refused_naming_the_field(body, field):
    with pytest.raises(UiInputError, match=f"^{field}:"):
        parse_session(body, 10, 600)


def test_a_session_request_gives_the_task_and_the_human_policy():
    task, policy = parse_session({"task": "click-test", "seed": "12", "name": "alice"}, 10, 600)
    assert (task.name, task.suite, task.seed, policy) == ("click-test", "miniwob", 12, "human:alice")


def _requests(token: str, calls):
    """Run ``calls(client)`` against the app on a test server; -> its result."""
    async def go():
        async with TestClient(TestServer(make_app(load_settings({}), token))) as client:
            return await calls(client)
    return asyncio.run(go())


def _origin(client) -> dict:
    return {"Origin": f"http://{client.host}:{client.port}"}


def test_writes_must_be_same_origin_json():
    async def calls(client):
        body = {"task": "click-test", "seed": 0, "name": "x' OR 1"}
        other = await client.post("/api/annotate/sessions", json=body, headers={"Origin": "http://evil.example"})
        none = await client.post("/api/annotate/sessions", json=body)
        form = await client.post("/api/annotate/sessions", data="task=click-test", headers=_origin(client))
        same = await client.post("/api/annotate/sessions", json=body, headers=_origin(client))
        return [(r.status, await r.text()) for r in (other, none, form, same)]

    (other, none, form, same) = _requests("", calls)
    assert other[0] == 403 and "origin" in other[1]
    assert none[0] == 403
    assert form[0] == 403 and "application/json" in form[1]
    assert same[0] == 400 and same[1].startswith("flywheel ui: name:")  # past the guard: the field is refused


def test_writes_need_the_token_and_bodies_are_bounded():
    token = "t" * 24

    async def calls(client):
        body = {"task": "click-test", "seed": 0, "name": "a", "thought": "x" * 20_000}
        no_token = await client.post("/api/annotate/sessions", json=body, headers=_origin(client))
        big = await client.post("/api/annotate/sessions", json=body,
                                headers={**_origin(client), "X-Flywheel-Token": token})
        bad_json = await client.post("/api/annotate/sessions", data="{", headers={
            **_origin(client), "X-Flywheel-Token": token, "Content-Type": "application/json"})
        gone = await client.post("/api/annotate/sessions/abc/act", json={"type": "click", "x": 1, "y": 1},
                                 headers={**_origin(client), "X-Flywheel-Token": token})
        hostile = await client.post("/api/annotate/sessions/a'b/act", json={},
                                    headers={**_origin(client), "X-Flywheel-Token": token})
        return [(r.status, await r.text()) for r in (no_token, big, bad_json, gone, hostile)]

    no_token, big, bad_json, gone, hostile = _requests(token, calls)
    assert no_token[0] == 401
    assert big[0] == 413
    assert bad_json[0] == 400 and "body" in bad_json[1]
    assert gone[0] == 404 and "session" in gone[1]
    assert hostile[0] == 400 and hostile[1].startswith("flywheel ui: session:")


def test_the_task_list_holds_the_registered_browser_tasks():
    async def calls(client):
        resp = await client.get("/api/annotate/tasks")
        return resp.status, await resp.json()

    status, families = _requests("", calls)
    assert status == 200 and "click-test" in families["miniwob"] and "enter-text" in families["miniwob"]


def test_a_token_app_serves_its_page_files_and_nothing_else_without_the_token():
    """The browser fetches the page's scripts without the token (a script tag sends no header):
    they hold no data; every read and write still needs it."""
    async def calls(client):
        out = [(await client.get(path)).status for path in ("/", "/app.js", "/annotate.js", "/correct.js")]
        out += [(await client.get(path)).status for path in ("/api/annotate/tasks", "/blob/" + "0" * 64, "/x.js")]
        return out

    assert _requests("t" * 24, calls) == [200, 200, 200, 200, 401, 401, 401]
