"""`flywheel ui`: serve the Run, Episodes, Annotate and Disagreements views on loopback (another address needs --token).

Every request carries a token: the one given, else a fresh random one printed in the URL (the
Annotate view and corrections write training data: another local user or process must not).
Give it in the environment (``FLYWHEEL_UI_TOKEN``, readable by its owner only), not with
``--token``, which any local user reads in the process list (``ps``); the variable is removed
from this process's environment once read, so its children do not inherit it. A token given
is never printed or logged; only a fresh one is printed, once, in the URL (its owner has no
other way to learn it). ``--no-token`` serves loopback without one. The access log has each
request's method and path, never its query string, where the page's image URLs carry the token.
``--through-sink`` never opens the chDB data directory (the demo's UI, started before its sink)."""

from __future__ import annotations

import argparse
import os
import secrets
from collections.abc import Mapping

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger

from app.ui.server import is_loopback, make_app
from infra.runtime.config import add_arguments
from infra.runtime.errors import UserError
from infra.runtime.settings import Settings, load_settings
from producers.human import SessionLimits

TOKEN_ENV = "FLYWHEEL_UI_TOKEN"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("ui", help="web app: the live run and episode replay (loopback)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (not loopback: --token required)")
    p.add_argument("--port", type=int, default=8765)
    p.add_argument("--token", default="", help=f"token every request must carry (?token= or X-Flywheel-Token); "
                                                f"prefer {TOKEN_ENV} (other local users see arguments in `ps`); "
                                                "default: a fresh random one, printed in the URL")
    p.add_argument("--no-token", action="store_true", help="serve loopback without a token (any local process may "
                                                           "then record demonstrations and corrections)")
    p.add_argument("--through-sink", action="store_true",
                   help="read only through a running `flywheel sink`, never opening its chDB data directory here "
                        "(the default opens it when no sink answers: a finished run is browsable alone)")
    p.add_argument("--annotate-sessions", type=int, default=SessionLimits.max_sessions,
                   help="Annotate view: browser sandboxes open at once (a person each)")
    p.add_argument("--annotate-idle-s", type=float, default=SessionLimits.idle_timeout_s,
                   help="Annotate view: seconds without an action before a session is closed (its episode aborted)")
    add_arguments(p, Settings)
    p.set_defaults(func=run)


def check_bind(host: str, token: str) -> None:
    if not is_loopback(host) and len(token) < 16:
        raise UserError(f"binding {host} (not loopback) needs a token ({TOKEN_ENV} or --token) of at least 16 characters")


class PathAccessLogger(AbstractAccessLogger):
    """One line per request: method, path, status and seconds; never the query string (a token)."""

    def log(self, request, response, time: float) -> None:
        self.logger.info("%s %s %s %.3fs", request.method, request.path, response.status, time)


def token_for(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> str:
    """The token the app checks: the one given (--token, else ``TOKEN_ENV`` in ``env``), none
    with --no-token, else a fresh random one."""
    given = args.token or (os.environ if env is None else env).get(TOKEN_ENV, "")
    if args.no_token and given:
        raise UserError(f"give a token (--token or {TOKEN_ENV}) or --no-token, not both")
    return given or ("" if args.no_token else secrets.token_urlsafe(18))


def shown_url(host: str, port: int, token: str, made_here: bool) -> str:
    """The URL to print: with the token only when this process made it (a token given stays
    where its owner put it; printed, it would reach whatever log holds this output)."""
    if not token:
        return f"http://{host}:{port}/"
    return f"http://{host}:{port}/?token={token}" if made_here else f"http://{host}:{port}/ (with the token given)"


def run(args: argparse.Namespace) -> int:
    given = bool(args.token or os.environ.get(TOKEN_ENV))
    args.token = token_for(args)
    os.environ.pop(TOKEN_ENV, None)  # Chromium and the other children need not have it
    check_bind(args.host, args.token)
    if args.annotate_sessions < 1 or args.annotate_idle_s <= 0:
        raise UserError("--annotate-sessions must be >= 1 and --annotate-idle-s > 0")
    limits = SessionLimits(max_sessions=args.annotate_sessions, idle_timeout_s=args.annotate_idle_s)
    settings = load_settings(vars(args))
    print(f"flywheel ui: {shown_url(args.host, args.port, args.token, not given)}", flush=True)
    web.run_app(make_app(settings, args.token, limits, open_chdb=not args.through_sink), host=args.host,
                port=args.port, print=None, access_log_class=PathAccessLogger)
    return 0
