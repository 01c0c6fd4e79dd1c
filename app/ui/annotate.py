"""The Annotate view's routes: a person records a demonstration in a live browser sandbox.

``POST /api/annotate/sessions`` {task, seed, name} opens a session (producers.human: a sandbox
of the UI's Chromium, the episode run by the rollouts' own loop) and answers its first view;
``POST .../{id}/act`` {type, x, y | text | key | direction, thought} performs one unified action
and answers the next screen; ``.../finish`` ends the episode with a ``finished`` step, ``.../close``
abandons it (aborted, never trained on). An answer with ``done`` comes after the broker
acknowledged every event of the episode; the session is closed then. Writes are same-origin and
token-checked by server.guard; bodies are bounded by the app's client_max_size.
"""

from __future__ import annotations

import asyncio
import logging

from aiohttp import web

from app.ui.annotate_input import parse_action, parse_session
from app.ui.queries import UiInputError, checked_id
from infra.runtime.settings import Settings
from producers.human import BROWSER_FAMILIES, DemoPublisher, HumanSessions, SessionFull, SessionLimits
from producers.tasks import known_tasks
from schemas.blobs import BlobStore

log = logging.getLogger("flywheel.ui.annotate")
SESSIONS_KEY = web.AppKey("annotate_sessions", HumanSessions)
SETTINGS_KEY = web.AppKey("annotate_settings", Settings)
LIMITS_KEY = web.AppKey("annotate_limits", SessionLimits)
REAP_EVERY_S = 10.0
STEP_MS = 100  # page time per step: the rollout workers' default (a reflection replay needs the same)


def _view(session_id: str, view) -> web.Response:
    return web.json_response({"session": session_id, **view.__dict__})


async def tasks(_request: web.Request) -> web.Response:
    return web.json_response({family: list(known_tasks(family)) for family in BROWSER_FAMILIES})


async def open_session(request: web.Request) -> web.Response:
    sessions = request.app[SESSIONS_KEY]
    task, policy = parse_session(await json_body(request), sessions.limits.max_steps, sessions.limits.episode_timeout_s)
    try:
        session, view = await asyncio.shield(sessions.open(task, policy))
    except SessionFull as exc:
        return web.Response(status=429, text=f"flywheel ui: {exc}\n")
    except Exception as exc:  # noqa: BLE001 - no browser, a task page that does not load: one line
        log.exception("opening an annotation session for %s failed", task.name)
        return web.Response(status=502, text=f"flywheel ui: no sandbox for {task.name}: {type(exc).__name__}: "
                                             f"{str(exc)[:300]}\n")
    log.info("annotation session %s: %s seed %d by %s", session.id, task.name, task.seed, policy)
    return _view(session.id, view)


async def act(request: web.Request) -> web.Response:
    sessions, session = _session(request)
    shown = session.last_view
    action, thought = parse_action(await json_body(request), shown.width, shown.height)
    return await _step(sessions, session, session.act(action, thought))


async def finish(request: web.Request) -> web.Response:
    sessions, session = _session(request)
    return await _step(sessions, session, session.finish())


async def _step(sessions: HumanSessions, session, step) -> web.Response:
    """One action's answer; the session is closed once its episode ended, or when the run failed
    (the broker did not acknowledge the demonstration, the sandbox broke): a 502 saying so."""
    try:
        view = await asyncio.shield(step)
    except Exception as exc:  # noqa: BLE001 - the person gets one line, the log the rest
        log.exception("annotation session %s failed", session.id)
        await sessions.drop(session.id, "failed")
        return web.Response(status=502, text=f"flywheel ui: the episode could not go on or be published: "
                                             f"{type(exc).__name__}: {str(exc)[:300]}\n")
    if view.done:
        await sessions.drop(session.id)
    return _view(session.id, view)


async def close(request: web.Request) -> web.Response:
    sessions, session = _session(request)
    await asyncio.shield(sessions.drop(session.id, "closed by the person"))
    return web.json_response({"session": session.id, "closed": True})


def _session(request: web.Request):
    sessions = request.app[SESSIONS_KEY]
    session_id = checked_id("session", request.match_info["session_id"])
    session = sessions.get(session_id)
    if session is None:
        raise web.HTTPNotFound(text=f"flywheel ui: no open annotation session {session_id!r} (ended or timed out)\n")
    return sessions, session


async def json_body(request: web.Request):
    """The request's JSON body; UiInputError when it is not JSON (its size is bounded by the app)."""
    try:
        return await request.json()
    except (ValueError, RecursionError, LookupError) as exc:  # LookupError: a charset Python does not know
        raise UiInputError(f"body: not JSON ({type(exc).__name__})") from None


async def annotate_ctx(app: web.Application):
    """The sessions' Chromium (launched at the first session) and Kafka producer, closed with the app."""
    settings = app[SETTINGS_KEY]
    hosts: list = []

    async def make_sandbox():
        # Playwright: imported when the first session opens, not for the read-only views
        from producers.sandboxes.browser import BrowserSandbox
        from producers.sandboxes.browser_host import BrowserHost

        if not hosts:
            hosts.append(BrowserHost())
        # a few task pages stay loaded: a person switching between tasks does not wait for a reload
        sandbox = BrowserSandbox(BlobStore(settings.blob_root), host=hosts[0], step_ms=STEP_MS, max_pages=3)
        try:
            await sandbox.start()
        except BaseException:
            await sandbox.close()  # a context opened before the failure is not left behind
            raise
        return sandbox

    publisher = DemoPublisher(settings)
    sessions = HumanSessions(publisher, make_sandbox, app[LIMITS_KEY])
    app[SESSIONS_KEY] = sessions

    async def reaper():
        while True:
            await asyncio.sleep(REAP_EVERY_S)
            try:
                await sessions.reap()
            except Exception:  # noqa: BLE001 - a sandbox that fails to close must not stop the reaping
                log.exception("closing idle annotation sessions failed")

    reaping = asyncio.create_task(reaper())
    yield
    reaping.cancel()
    await sessions.close()
    for host in hosts:
        await host.close()
    await asyncio.to_thread(publisher.close)


def add_routes(app: web.Application, settings: Settings, limits: SessionLimits | None = None) -> None:
    app[SETTINGS_KEY] = settings
    app[LIMITS_KEY] = limits or SessionLimits()
    app.cleanup_ctx.append(annotate_ctx)
    app.router.add_get("/api/annotate/tasks", tasks)
    app.router.add_post("/api/annotate/sessions", open_session)
    app.router.add_post("/api/annotate/sessions/{session_id}/act", act)
    app.router.add_post("/api/annotate/sessions/{session_id}/finish", finish)
    app.router.add_post("/api/annotate/sessions/{session_id}/close", close)
