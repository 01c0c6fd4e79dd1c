"""The `flywheel ui` web app (aiohttp): static page + JSON reads; loopback unless given a token.
The page's charts are Plotly.js, served from the installed ``plotly`` package (nothing fetched
from outside the machine).
Its writes, the Annotate view's actions (annotate.py) and the corrections (corrections.py), are
same-origin JSON (``cross_origin``) with bounded bodies (``MAX_BODY``).

Reads go where `flywheel sql`'s go (infra.clickhouse.query.execute: the configured ClickHouse
server, else the read-only endpoint of the process that owns embedded chDB, the sink, else the
data directory opened for one read and closed), so a finished run is browsable with no sink; an
app made with ``open_chdb=False`` (the demo's, started before its sink) never opens the directory,
which would lock the sink out. Every statement passes ``sql_policy.check`` first;
user input reaches SQL only as bind parameters. A bad parameter is a 400 with one line, never a
trace; no ClickHouse to read is a 503. Every response carries ``SECURITY_HEADERS`` (the token
rides in the page's URLs: no referrer, no framing). Kafka consumer lag comes from the admin
client (infra.runtime.admin.consumer_lag).
"""

from __future__ import annotations

import asyncio
import functools
import importlib.util
import ipaddress
import logging
import secrets
from pathlib import Path

import orjson
from aiohttp import web

from app.ui import annotate, corrections, disagreements, queries
from app.ui.queries import UiInputError
from app.ui.replay import marker
from infra.clickhouse.query import execute
from infra.runtime.admin import consumer_lag
from infra.runtime.errors import UserError
from infra.runtime.settings import Settings
from producers.human import SessionLimits
from schemas.blobs import BlobNotFound, BlobStore

log = logging.getLogger("flywheel.ui")
STATIC = Path(__file__).parent / "static"
TOKEN_HEADER = "X-Flywheel-Token"
SETTINGS_KEY = web.AppKey("settings", Settings)
TOKEN_KEY = web.AppKey("token", str)
OPEN_CHDB_KEY = web.AppKey("open_chdb", bool)
PAGE_FILES = frozenset({"/", "/app.js", "/charts.js", "/annotate.js", "/correct.js", "/disagree.js",
                        "/plotly.min.js"})
MAX_BODY = 16 * 1024  # bytes of a request body: an action, a correction (typed text is bounded apart)
SECURITY_HEADERS = {
    "X-Frame-Options": "DENY",  # no other site frames the page (clickjacking an annotation or a correction)
    "Content-Security-Policy": "frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",  # a screenshot or a JSON answer is never run as a script
    "Referrer-Policy": "no-referrer",  # the token rides in the page's URLs: no link or image sends it on
}


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


def run_sql(settings: Settings, sql: str, params: dict, open_chdb: bool = True) -> list[dict]:
    """Rows of one policy-checked statement, as dicts (blocking: call it in a thread); UserError
    when there is no ClickHouse to read or it failed."""
    columns, rows, _how = execute(settings, sql, params, open_here=open_chdb)
    return [dict(zip(columns, row)) for row in rows]


async def read(request: web.Request, sql: str, params: dict) -> list[dict]:
    """``run_sql`` for a request, in a thread, where this app may read."""
    return await asyncio.to_thread(run_sql, request.app[SETTINGS_KEY], sql, params, request.app[OPEN_CHDB_KEY])


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
        if not token_matches(given, token):
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
    except UserError as exc:  # ClickHouse: none to read, or it failed (one line, not a trace)
        return web.Response(status=503, text=f"flywheel ui: {str(exc).splitlines()[0][:300]}\n")


def token_matches(given: str, token: str) -> bool:
    """Whether ``given`` is the token, in constant time. Header bytes that are not UTF-8 reach
    us as surrogates, which a plain ``str.encode`` refuses (that was a 500): they are kept as
    bytes, which never equal the token."""
    return secrets.compare_digest(given.encode("utf-8", "surrogatepass"), token.encode())


async def security_headers(_request: web.Request, response: web.StreamResponse) -> None:
    """``SECURITY_HEADERS`` on every response, the ones aiohttp makes for errors included (a
    signal, not a middleware: it also sees a 404 of the router or a raised HTTPException)."""
    response.headers.update(SECURITY_HEADERS)


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
    return _json(queries.runs_of(await read(request, queries.RUNS_SQL, {})))


async def run_view(request: web.Request) -> web.Response:
    settings = request.app[SETTINGS_KEY]
    panels = queries.run_queries(request.query.get("run", ""))
    # asked beside the reads: with no broker (a finished run) it waits out its timeout
    lagging = asyncio.ensure_future(asyncio.to_thread(consumer_lag, settings))
    out: dict = {}
    for name, (sql, params) in panels.items():
        try:
            out[name] = await read(request, sql, params)
        except Exception as exc:  # one panel's failure (e.g. an empty table) must not blank the page
            out[name] = {"error": str(exc).splitlines()[0][:300]}
    try:
        lag = await lagging  # topics without this platform's prefix
        out["consumer_lag"] = {g: {t.removeprefix(settings.topic_prefix): n for t, n in per_topic.items()}
                               for g, per_topic in lag.items()}
    except Exception as exc:
        out["consumer_lag"] = {"error": str(exc).splitlines()[0][:300]}
    return _json(out)


async def episodes(request: web.Request) -> web.Response:
    sql, params = queries.episodes_sql(queries.EpisodeFilter.parse(dict(request.query)))
    return _json(await read(request, sql, params))


async def episode(request: web.Request) -> web.Response:
    episode_id = request.match_info["episode_id"]
    sql, params = queries.episode_steps_sql(episode_id)
    steps = await read(request, sql, params)
    if not steps:
        return web.Response(status=404, text=f"flywheel ui: no steps for episode {episode_id!r}\n")
    for step in steps:
        step["marker"] = marker(step["action"], step["screen_width"], step["screen_height"])
    sql, params = queries.episode_pairs_sql(episode_id)
    pairs = await read(request, sql, params)
    return _json({"episode_id": episode_id, "steps": steps, "pairs": pairs})


async def disagreements_view(request: web.Request) -> web.Response:
    """The episodes a verifier and the page disagree on, with the confusion table per task."""
    f = disagreements.DisagreementFilter.parse(dict(request.query))
    confusion = await read(request, *disagreements.confusion_sql(f))
    episodes = await read(request, *disagreements.episodes_sql(f)) if confusion else []
    return _json(disagreements.view(confusion, episodes))


async def blob(request: web.Request) -> web.Response:
    store = BlobStore(request.app[SETTINGS_KEY].blob_root)
    try:
        data = await asyncio.to_thread(store.get, request.match_info["sha"])
    except BlobNotFound as exc:
        return web.Response(status=404, text=f"flywheel ui: no such screenshot ({exc})\n")
    return web.Response(body=data, content_type="image/png",
                        headers={"Cache-Control": "max-age=86400, immutable"})


def make_app(settings: Settings, token: str = "", limits: SessionLimits | None = None,
             open_chdb: bool = True) -> web.Application:
    """The app; ``limits`` bound the Annotate view's sessions (producers.human.SessionLimits);
    ``open_chdb``: whether, with no sink answering, a read may open the chDB data directory."""
    app = web.Application(middlewares=[guard], client_max_size=MAX_BODY)
    app.on_response_prepare.append(security_headers)
    app[SETTINGS_KEY] = settings
    app[TOKEN_KEY] = token
    app[OPEN_CHDB_KEY] = open_chdb
    app.router.add_get("/", index)
    app.router.add_get("/{name:app|charts|annotate|correct|disagree}.js", script)  # PAGE_FILES
    app.router.add_get("/plotly.min.js", plotly)
    app.router.add_get("/api/run", run_view)
    app.router.add_get("/api/runs", runs)
    app.router.add_get("/api/episodes", episodes)
    app.router.add_get("/api/episodes/{episode_id}", episode)
    app.router.add_get("/api/disagreements", disagreements_view)
    app.router.add_get("/blob/{sha}", blob)
    annotate.add_routes(app, settings, limits)
    corrections.add_routes(app, settings, functools.partial(run_sql, open_chdb=open_chdb))
    return app
