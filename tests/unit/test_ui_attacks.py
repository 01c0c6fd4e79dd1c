"""The UI tried as an attacker would: the token in no process's arguments or log line, every
malformed request a 4xx with the server alive, and the security headers on every response."""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from urllib.parse import quote

import pytest
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import HealthCheck, given, settings as hyp_settings, strategies as st

from app.ui import cli, server
from app.ui.annotate_input import parse_action
from app.ui.queries import EpisodeFilter, UiInputError
from app.ui.server import SECURITY_HEADERS, make_app
from infra.runtime.settings import load_settings

TOKEN = "Tok3n-" + "s" * 20


def _run(calls, token: str = TOKEN, **app_kw):
    async def go():
        async with TestClient(TestServer(make_app(load_settings({}), token, **app_kw))) as client:
            return await calls(client)
    return asyncio.run(go())


@pytest.fixture
def no_reads(monkeypatch):
    """Reads answer no rows: a request that passes validation never reaches ClickHouse or Kafka here."""
    monkeypatch.setattr(server, "run_sql", lambda *_a, **_k: [])
    monkeypatch.setattr(server, "consumer_lag", lambda *_a, **_k: {})


# --- the token: in the environment, never in argv or a log line ---------------------------------

def _ui_run(monkeypatch, argv: list[str], env: dict[str, str]) -> tuple[str, dict]:
    """`flywheel ui` ``argv`` with ``env``, up to serving: (what it printed, what it served with)."""
    served: dict = {}
    printed: list[str] = []
    for name in list(cli.os.environ):
        if name.startswith("FLYWHEEL_"):
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(cli.web, "run_app", lambda app, **kw: served.update(app=app, **kw))
    monkeypatch.setattr("builtins.print", lambda *a, **_k: printed.append(" ".join(map(str, a))))
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers())
    assert cli.run(parser.parse_args(["ui", *argv])) == 0
    return "\n".join(printed), served


def test_a_token_from_the_environment_is_checked_never_printed_and_not_inherited(monkeypatch):
    out, served = _ui_run(monkeypatch, ["--port", "9"], {cli.TOKEN_ENV: TOKEN})
    assert served["app"][server.TOKEN_KEY] == TOKEN
    assert TOKEN not in out and "http://127.0.0.1:9/" in out
    assert cli.TOKEN_ENV not in cli.os.environ  # the browser and other children do not inherit it
    assert served["app"][server.OPEN_CHDB_KEY] is True


def test_the_flag_still_works_and_a_fresh_token_is_printed_once(monkeypatch):
    out, served = _ui_run(monkeypatch, ["--token", TOKEN, "--through-sink"], {})
    assert served["app"][server.TOKEN_KEY] == TOKEN and TOKEN not in out
    assert served["app"][server.OPEN_CHDB_KEY] is False
    out, served = _ui_run(monkeypatch, [], {})
    made = served["app"][server.TOKEN_KEY]
    assert len(made) >= 16 and f"?token={made}" in out  # its owner has no other way to learn it


def test_a_token_in_the_environment_and_no_token_conflict(monkeypatch):
    with pytest.raises(cli.UserError, match=cli.TOKEN_ENV):
        cli.token_for(argparse.Namespace(token="", no_token=True), {cli.TOKEN_ENV: TOKEN})
    assert cli.token_for(argparse.Namespace(token="", no_token=False), {cli.TOKEN_ENV: TOKEN}) == TOKEN
    assert cli.token_for(argparse.Namespace(token="flag-" + "f" * 20, no_token=False),
                         {cli.TOKEN_ENV: TOKEN}) == "flag-" + "f" * 20


# --- malformed input: a 4xx, never a 500 ---------------------------------------------------------

async def _raw(client, request: bytes) -> bytes:
    reader, writer = await asyncio.open_connection(client.host, client.port)
    writer.write(request)
    await writer.drain()
    data = await reader.read(65536)
    writer.close()
    return data


@pytest.mark.parametrize("value", [b"\xff\xfe", b"Tok3n-\xc3", b"\xed\xa0\x80" + b"s" * 20, b"\x80" * 26])
def test_a_token_header_of_bytes_that_are_not_utf8_is_a_401(value, no_reads):
    async def calls(client):
        raw = await _raw(client, b"GET /api/episodes HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Flywheel-Token: " + value
                         + b"\r\nConnection: close\r\n\r\n")
        alive = await client.get("/api/episodes", headers={"X-Flywheel-Token": TOKEN})
        return raw, alive.status

    raw, alive = _run(calls)
    assert raw.startswith(b"HTTP/1.1 401"), raw[:200]
    assert alive == 200


@pytest.mark.parametrize("header", [b"Host: \xff\xfe:1", b"Origin: http://\xff\xfe", b"Content-Type: app/\xff; charset=\xfe",
                                    b"Content-Type: application/json; charset=\xff", b"Host: [::1", b"Host: :::::"])
@pytest.mark.parametrize("token", ["", TOKEN])
def test_other_headers_of_bytes_that_are_not_utf8_are_a_4xx(header, token, no_reads):
    """The headers the guard reads (Host without a token, Origin and Content-Type for writes)."""
    async def calls(client):
        answers = []
        for request in (b"GET /api/runs", b"POST /api/corrections"):
            answers.append(await _raw(client, request + b" HTTP/1.1\r\n" + header + b"\r\nX-Flywheel-Token: "
                                      + token.encode() + b"\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}"))
        alive = await client.get("/api/annotate/tasks", headers={"X-Flywheel-Token": token})
        return answers, alive.status

    answers, alive = _run(calls, token)
    for raw in answers:
        assert raw[:10] in (b"HTTP/1.1 4", b"HTTP/1.0 4") or raw.startswith(b"HTTP/1.1 2"), raw[:200]
    assert alive == 200


@pytest.mark.parametrize("query", ["token=%FF%FE", "token=%ED%A0%80", "token=" + "%C3" * 30])
def test_a_token_parameter_of_bytes_that_are_not_utf8_is_a_401(query, no_reads):
    async def calls(client):
        raw = await _raw(client, f"GET /api/runs?{query} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                 "Connection: close\r\n\r\n".encode())
        return raw

    raw = _run(calls)
    assert raw.startswith(b"HTTP/1.1 401"), raw[:200]


@pytest.mark.parametrize("version", ["²", "١٢", "1²", "٣"])
def test_a_version_of_digits_python_cannot_read_as_an_integer_is_a_400_naming_it(version, no_reads):
    with pytest.raises(UiInputError, match="^version:"):
        EpisodeFilter.parse({"version": version})

    async def calls(client):
        resp = await client.get("/api/episodes", params={"version": version}, headers={"X-Flywheel-Token": TOKEN})
        return resp.status, await resp.text()

    status, text = _run(calls)
    assert status == 400 and text.startswith("flywheel ui: version:"), text


@pytest.mark.parametrize("value", [10**400, -(10**400), 10**20], ids=["1e400", "-1e400", "1e20"])
def test_a_coordinate_too_large_for_a_float_is_refused_naming_it(value):
    with pytest.raises(UiInputError, match="^x:"):
        parse_action({"type": "click", "x": value, "y": 1}, 160, 210)


ROUTES_GET = ["/api/runs", "/api/run", "/api/episodes", "/api/episodes/{p}", "/blob/{p}", "/api/annotate/tasks",
              "/{p}", "/{p}.js"]
ROUTES_POST = ["/api/annotate/sessions", "/api/annotate/sessions/{p}/act", "/api/annotate/sessions/{p}/finish",
               "/api/annotate/sessions/{p}/close", "/api/corrections"]
PARAMS = ["run", "task", "policy", "version", "outcome", "token"]
texts = st.text(max_size=40) | st.sampled_from(["²", "-1", "9" * 30, "\x00", "\ud800", "%ff", "..", "1e9"])
json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | texts,
                           lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4),
                           max_leaves=12)
bodies = st.dictionaries(st.sampled_from(["type", "x", "y", "x1", "y2", "text", "key", "direction", "thought", "task",
                                          "seed", "name", "episode", "tau", "action"]), json_values, max_size=6)


requests = st.tuples(st.sampled_from(ROUTES_GET + ROUTES_POST), texts,
                     st.dictionaries(st.sampled_from(PARAMS), texts, max_size=4), bodies | json_values, texts)


@hyp_settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(requests, min_size=25, max_size=25))
def test_fuzzed_requests_are_answered_below_500_and_the_server_stays_up(no_reads, batch):
    """Random path parts, query parameters, token headers and JSON bodies on every route, with
    the token and with a random one; then the server still answers (one server per batch)."""
    async def calls(client):
        return [(request, await _fuzz(client, *request)) for request in batch]

    for request, statuses in _run(calls):
        assert all(status < 500 for status in statuses), (request, statuses)
        assert statuses[-1] == 200  # alive


async def _fuzz(client, route: str, part: str, query: dict, body, token_header: str) -> list[int]:
    path = route.replace("{p}", quote(part.encode("utf-8", "surrogatepass"), safe="") or "x")
    same_origin = {"Origin": f"http://{client.host}:{client.port}", "Content-Type": "application/json"}
    params = {k: _unicode(v) for k, v in query.items()}
    data = json.dumps(body, ensure_ascii=False).encode("utf-8", "surrogatepass")  # a lone surrogate: raw bytes
    out = []
    for token in (TOKEN, _printable(token_header)):
        headers = {**same_origin, "X-Flywheel-Token": token}
        if route in ROUTES_POST:
            resp = await client.post(path, params=params, data=data, headers=headers)
        else:
            resp = await client.get(path, params=params, headers=headers)
        out.append(resp.status)
    out.append((await client.get("/api/annotate/tasks", headers={"X-Flywheel-Token": TOKEN})).status)
    return out


def _unicode(text: str) -> str:
    """``text`` without lone surrogates (a URL cannot carry them)."""
    return text.encode("utf-8", "replace").decode()


def _printable(text: str) -> str:
    """``text`` as a header value the client will send (no control characters: a header injection)."""
    return "".join(c for c in text if 32 <= ord(c) < 127)


# --- headers on every response ---------------------------------------------------------------------

def test_every_response_carries_the_security_headers(no_reads):
    async def calls(client):
        token = {"X-Flywheel-Token": TOKEN}
        responses = [await client.get("/"), await client.get("/app.js"), await client.get("/api/episodes"),
                     await client.get("/api/episodes", headers=token),
                     await client.get("/api/episodes?version=²", headers=token),
                     await client.get("/blob/" + "0" * 64, headers=token), await client.get("/nope", headers=token),
                     await client.post("/api/corrections", data="{}", headers=token)]
        return [(r.status, dict(r.headers)) for r in responses]

    got = _run(calls)
    assert [s for s, _ in got] == [200, 200, 401, 200, 400, 404, 404, 403]
    for status, headers in got:
        for name, value in SECURITY_HEADERS.items():
            assert headers.get(name) == value, (status, name, headers)
    assert SECURITY_HEADERS["Content-Security-Policy"] == "frame-ancestors 'none'"
    assert SECURITY_HEADERS["X-Frame-Options"] == "DENY" and SECURITY_HEADERS["Referrer-Policy"] == "no-referrer"
    assert SECURITY_HEADERS["X-Content-Type-Options"] == "nosniff"


def test_no_clickhouse_to_read_is_a_503_naming_the_sink(tmp_path):
    """The demo's UI (``open_chdb=False``) with no sink answering: a clear 503, the data directory untouched."""
    async def calls(client):
        resp = await client.get("/api/episodes", headers={"X-Flywheel-Token": TOKEN})
        return resp.status, await resp.text()

    async def go():
        app = make_app(load_settings({"data_dir": str(tmp_path)}), TOKEN, open_chdb=False)
        async with TestClient(TestServer(app)) as client:
            return await calls(client)

    status, text = asyncio.run(go())
    assert status == 503 and "flywheel sink" in text, text
    assert not Path(tmp_path, "chdb").exists() and not any(tmp_path.rglob("status"))
