"""Review of the UI as an attacker: hostile bodies, text and Host names get a clear 4xx, never a 500."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp.test_utils import TestClient, TestServer

from app.ui.annotate_input import parse_action, parse_session
from app.ui.queries import UiInputError
from app.ui.server import make_app
from infra.runtime.settings import load_settings


def _run(calls, token: str = ""):
    async def go():
        async with TestClient(TestServer(make_app(load_settings({}), token))) as client:
            return await calls(client)
    return asyncio.run(go())


def _same_origin(client) -> dict:
    return {"Origin": f"http://{client.host}:{client.port}", "Content-Type": "application/json"}


@pytest.mark.parametrize("data,headers", [
    ("[" * 15_000, {}),  # nested past Python's recursion limit, within the size bound
    ("{}", {"Content-Type": "application/json; charset=no-such-charset"}),
])
def test_a_body_json_cannot_decode_is_a_400_not_a_500(data, headers):
    async def calls(client):
        resp = await client.post("/api/annotate/sessions", data=data, headers={**_same_origin(client), **headers})
        return resp.status, await resp.text()

    status, text = _run(calls)
    assert status == 400 and text.startswith("flywheel ui: body:")


@pytest.mark.parametrize("body,field", [
    ({"type": "type", "text": "a\ud800b"}, "text"),
    ({"type": "click", "x": 1, "y": 1, "thought": "\udfff"}, "thought"),
])
def test_text_that_is_not_unicode_is_refused_naming_the_field(body, field):
    with pytest.raises(UiInputError, match=f"^{field}:"):
        parse_action(body, 160, 210)


def test_a_task_name_that_is_not_unicode_is_refused_naming_the_field():
    with pytest.raises(UiInputError, match="^task:"):
        parse_session({"task": "click\ud800", "seed": 0, "name": "a"}, 10, 600)


def test_without_a_token_only_loopback_host_names_are_served():
    """A page of another site whose name resolves to 127.0.0.1 (DNS rebinding) is same-origin with
    itself: its Host is its own name, which a token-less app (loopback only) refuses."""
    async def calls(client):
        evil = {"Host": f"rebind.example:{client.port}", "Origin": f"http://rebind.example:{client.port}"}
        read = await client.get("/api/annotate/tasks", headers={"Host": evil["Host"]})
        write = await client.post("/api/annotate/sessions", json={"task": "click-test", "seed": 0, "name": "a b"},
                                  headers=evil)
        local = await client.get("/api/annotate/tasks", headers={"Host": f"localhost:{client.port}"})
        v6 = await client.get("/api/annotate/tasks", headers={"Host": f"[::1]:{client.port}"})
        return [(r.status, await r.text()) for r in (read, write, local, v6)]

    read, write, local, v6 = _run(calls)
    assert read[0] == 403 and "rebind.example" in read[1] and "--token" in read[1]
    assert write[0] == 403
    assert local[0] == 200 and v6[0] == 200


def test_a_token_app_takes_any_host_name_with_the_token():
    token = "t" * 24

    async def calls(client):
        resp = await client.get("/api/annotate/tasks", headers={"Host": "flywheel.lan", "X-Flywheel-Token": token})
        return resp.status

    assert _run(calls, token) == 200


class HalfStarted:
    """A browser sandbox whose context opened but whose clock could not be installed."""

    made: list = []

    def __init__(self, *_a, **_k) -> None:
        self.closed = False
        HalfStarted.made.append(self)

    async def start(self):
        raise RuntimeError("clock.install: Target closed")

    async def close(self):
        self.closed = True


class Host:
    async def close(self):
        pass


def test_a_sandbox_that_fails_to_start_is_closed(monkeypatch):
    """Its browser context must not stay open: the person gets a 502, the machine nothing left over."""
    from producers.sandboxes import browser, browser_host  # Playwright: imported here, as annotate does

    monkeypatch.setattr(browser, "BrowserSandbox", HalfStarted)
    monkeypatch.setattr(browser_host, "BrowserHost", Host)
    HalfStarted.made = []

    async def calls(client):
        resp = await client.post("/api/annotate/sessions", json={"task": "click-test", "seed": 0, "name": "a"},
                                 headers={"Origin": f"http://{client.host}:{client.port}"})
        return resp.status, await resp.text()

    status, text = _run(calls)
    assert status == 502 and "Target closed" in text
    assert [s.closed for s in HalfStarted.made] == [True]


@pytest.mark.parametrize("seed", ["²", "٣", "1²"])
def test_a_seed_of_digits_python_cannot_read_as_an_integer_is_refused_naming_the_field(seed):
    """str.isdigit is true for "²", which int() refuses: that was a ValueError past the guard, a 500."""
    with pytest.raises(UiInputError, match="^seed:"):
        parse_session({"task": "click-test", "seed": seed, "name": "a"}, 10, 600)
