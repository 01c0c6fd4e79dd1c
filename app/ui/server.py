"""The `flywheel ui` web app (aiohttp): static page + JSON reads; loopback unless given a token.
The page's charts are Plotly.js, served from the installed ``plotly`` package (nothing fetched
from outside the machine).
Its writes, the Annotate view's actions (annotate.py) and the corrections (corrections.py), are
same-origin JSON (``cross_origin``) with bounded bodies (``MAX_BODY``).

Reads go to ClickHouse through the read-only endpoint of the process that owns embedded chDB
(the sink), or the configured ClickHouse server; the UI never opens the data directory itself,
which would lock the sink out. Every statement passes ``sql_policy.check`` here first;
user input reaches SQL only as bind parameters. A bad parameter is a 400 with one line, never a
trace. Kafka consumer lag comes from the admin client (infra.runtime.admin.consumer_lag).
"""

from __future__ import annotations

import asyncio
import importlib.util
import ipaddress
import logging
import secrets
from pathlib import Path

import orjson
from aiohttp import web

from app.ui import annotate, corrections, queries
from app.ui.queries import UiInputError
from app.ui.replay import marker
from infra.clickhouse.client import query_client
from infra.clickhouse.endpoint import find_endpoint
from infra.clickhouse.sql_policy import check
from infra.runtime.admin import consumer_lag
from infra.runtime.settings import Settings
from producers.human import SessionLimits
from schemas.blobs import BlobNotFound, BlobStore

log = logging.getLogger("flywheel.ui")
STATIC = Path(__file__).parent / "static"
TOKEN_HEADER = "X-Flywheel-Token"
SETTINGS_KEY = web.AppKey("settings", Settings)
TOKEN_KEY = web.AppKey("token", str)
PAGE_FILES = frozenset({"/", "/app.js", "/charts.js", "/annotate.js", "/correct.js", "/plotly.min.js"})
MAX_BODY = 16 * 1024  # bytes of a request body: an action, a correction (typed text is bounded apart)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def host_name(host: str) -> str:
    """The name a Host header gives, without its port: ``[::1]:8765`` -> ``::1``."""
    if host.startswith("["):
        return host[1:].partition("]")[0]
    return (host.rpartition(":")[0] if host.count(":") == 1 else host).lower()


def run_sql(settings: Settings, sql: str, params: dict) -> list[dict]:
    """Rows of one policy-checked statement, as dicts (blocking: call it in a thread)."""
    checked = check(sql)
    if not settings.clickhouse_url and find_endpoint(settings) is None:
        raise UiInputError("no ClickHouse to read: start `flywheel sink` (it owns the data and serves reads)")
    client, _how = query_client(settings)
    try:
        result = client.query(checked, parameters=params)
        return [dict(zip(result.column_names, row)) for row in result.result_rows]
    finally:
        client.close()


def _json(data, status: int = 200) -> web.Response:
    return web.json_response(data, status=status, dumps=_dumps)


def _dumps(obj) -> str:
    return orjson.dumps(obj, default=str).decode()


def cross_origin(request: web.Request) -> str | None:
    """Why a write (any method but GET/HEAD) is refused as not same-origin, or None: it must carry
    an ``Origin`` equal to this server's own and a JSON body (a plain form cannot send one)."""
    if request.method in ("GET", "HEAD", "OPTIONS"):
        return None
    origin = request.headers.get("Origin", "")
    if origin != f"{request.scheme}://{request.host}":
        return f"write from origin {origin[:80]!r} refused (same-origin only)"
    if request.content_type != "application/json":
        return f"write with content type {request.content_type[:60]!r} refused (application/json only)"
    return None


@web.middleware
async def guard(request: web.Request, handler):
    """Token (when the app has one; without one, a loopback Host), same origin for writes, then
    the handler; UiInputError becomes a clear 400."""
    token = request.app[TOKEN_KEY]
    if token and request.path not in PAGE_FILES:  # the page's own files hold no data; its requests carry the token
        given = request.headers.get(TOKEN_HEADER) or request.query.get("token") or ""
        if not secrets.compare_digest(given.encode(), token.encode()):
            return web.Response(status=401, text="flywheel ui: wrong or missing token\n")
    if not token and not is_loopback(host_name(request.host)):  # another site's name bound to 127.0.0.1 (DNS rebinding)
        return web.Response(status=403, text=f"flywheel ui: host {request.host[:80]!r} refused: without --token "
                                             "only loopback names (127.0.0.1, localhost, [::1]) are served\n")
    refused = cross_origin(request)
    if refused:
        return web.Response(status=403, text=f"flywheel ui: {refused}\n")
    try:
        return await handler(request)
    except UiInputError as exc:
        return web.Response(status=400, text=f"flywheel ui: {exc}\n")


async def index(_request: web.Request) -> web.FileResponse:
    return web.FileResponse(STATIC / "index.html")


async def script(request: web.Request) -> web.FileResponse:
    return web.FileResponse(STATIC / f"{request.match_info['name']}.js")


def plotly_js() -> Path | None:
    """The minified Plotly.js the ``plotly`` package ships (found without importing it), or None."""
    spec = importlib.util.find_spec("plotly")
    path = Path(spec.origin).parent / "package_data" / "plotly.min.js" if spec and spec.origin else None
    return path if path and path.is_file() else None


async def plotly(_request: web.Request) -> web.StreamResponse:
    path = plotly_js()
    if path is None:
        return web.Response(status=500, text="flywheel ui: the plotly package is not installed (pip install plotly)\n")
    return web.FileResponse(path, headers={"Cache-Control": "max-age=86400"})


async def runs(request: web.Request) -> web.Response:
    rows = await asyncio.to_thread(run_sql, request.app[SETTINGS_KEY], queries.RUNS_SQL, {})
    return _json(queries.runs_of(rows))


async def run_view(request: web.Request) -> web.Response:
    settings = request.app[SETTINGS_KEY]
    out: dict = {}
    for name, (sql, params) in queries.run_queries(request.query.get("run", "")).items():
        try:
            out[name] = await asyncio.to_thread(run_sql, settings, sql, params)
        except Exception as exc:  # one panel's failure (e.g. an empty table) must not blank the page
            out[name] = {"error": str(exc).splitlines()[0][:300]}
    try:
        lag = await asyncio.to_thread(consumer_lag, settings)  # topics without this platform's prefix
        out["consumer_lag"] = {g: {t.removeprefix(settings.topic_prefix): n for t, n in per_topic.items()}
                               for g, per_topic in lag.items()}
    except Exception as exc:
        out["consumer_lag"] = {"error": str(exc).splitlines()[0][:300]}
    return _json(out)


async def episodes(request: web.Request) -> web.Response:
    sql, params = queries.episodes_sql(queries.EpisodeFilter.parse(dict(request.query)))
    return _json(await asyncio.to_thread(run_sql, request.app[SETTINGS_KEY], sql, params))


async def episode(request: web.Request) -> web.Response:
    episode_id = request.match_info["episode_id"]
    sql, params = queries.episode_steps_sql(episode_id)
    settings = request.app[SETTINGS_KEY]
    steps = await asyncio.to_thread(run_sql, settings, sql, params)
    if not steps:
        return web.Response(status=404, text=f"flywheel ui: no steps for episode {episode_id!r}\n")
    for step in steps:
        step["marker"] = marker(step["action"], step["screen_width"], step["screen_height"])
    sql, params = queries.episode_pairs_sql(episode_id)
    pairs = await asyncio.to_thread(run_sql, settings, sql, params)
    return _json({"episode_id": episode_id, "steps": steps, "pairs": pairs})


async def blob(request: web.Request) -> web.Response:
    store = BlobStore(request.app[SETTINGS_KEY].blob_root)
    try:
        data = await asyncio.to_thread(store.get, request.match_info["sha"])
    except BlobNotFound as exc:
        return web.Response(status=404, text=f"flywheel ui: no such screenshot ({exc})\n")
    return web.Response(body=data, content_type="image/png",
                        headers={"Cache-Control": "max-age=86400, immutable"})


def make_app(settings: Settings, token: str = "", limits: SessionLimits | None = None) -> web.Application:
    """The app; ``limits`` bound the Annotate view's sessions (producers.human.SessionLimits)."""
    app = web.Application(middlewares=[guard], client_max_size=MAX_BODY)
    app[SETTINGS_KEY] = settings
    app[TOKEN_KEY] = token
    app.router.add_get("/", index)
    app.router.add_get("/{name:app|charts|annotate|correct}.js", script)  # PAGE_FILES
    app.router.add_get("/plotly.min.js", plotly)
    app.router.add_get("/api/run", run_view)
    app.router.add_get("/api/runs", runs)
    app.router.add_get("/api/episodes", episodes)
    app.router.add_get("/api/episodes/{episode_id}", episode)
    app.router.add_get("/blob/{sha}", blob)
    annotate.add_routes(app, settings, limits)
    corrections.add_routes(app, settings, run_sql)
    return app
