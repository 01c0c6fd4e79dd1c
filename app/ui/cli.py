"""`flywheel ui`: serve the Run, Episodes and Annotate views on loopback (another address needs --token).

Every request carries a token: the one given, else a fresh random one printed in the URL (the
Annotate view and corrections write training data: another local user or process must not).
``--no-token`` serves loopback without one. The access log has each request's method and path,
never its query string, where the page's image URLs carry the token."""

from __future__ import annotations

import argparse
import secrets

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger

from app.ui.server import is_loopback, make_app
from infra.runtime.config import add_arguments
from infra.runtime.errors import UserError
from infra.runtime.settings import Settings, load_settings
from producers.human import SessionLimits


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("ui", help="web app: the live run and episode replay (loopback)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (not loopback: --token required)")
    p.add_argument("--port", type=int, default=8765)
    p.add_argument("--token", default="", help="token every request must carry (?token= or X-Flywheel-Token); "
                                                "default: a fresh random one, printed in the URL")
    p.add_argument("--no-token", action="store_true", help="serve loopback without a token (any local process may "
                                                           "then record demonstrations and corrections)")
    p.add_argument("--annotate-sessions", type=int, default=SessionLimits.max_sessions,
                   help="Annotate view: browser sandboxes open at once (a person each)")
    p.add_argument("--annotate-idle-s", type=float, default=SessionLimits.idle_timeout_s,
                   help="Annotate view: seconds without an action before a session is closed (its episode aborted)")
    add_arguments(p, Settings)
    p.set_defaults(func=run)


def check_bind(host: str, token: str) -> None:
    if not is_loopback(host) and len(token) < 16:
        raise UserError(f"binding {host} (not loopback) needs --token of at least 16 characters")


class PathAccessLogger(AbstractAccessLogger):
    """One line per request: method, path, status and seconds; never the query string (a token)."""

    def log(self, request, response, time: float) -> None:
        self.logger.info("%s %s %s %.3fs", request.method, request.path, response.status, time)


def token_for(args: argparse.Namespace) -> str:
    """The token the app checks: the one given, none with --no-token, else a fresh random one."""
    if args.no_token and args.token:
        raise UserError("give --token or --no-token, not both")
    return args.token or ("" if args.no_token else secrets.token_urlsafe(18))


def run(args: argparse.Namespace) -> int:
    args.token = token_for(args)
    check_bind(args.host, args.token)
    if args.annotate_sessions < 1 or args.annotate_idle_s <= 0:
        raise UserError("--annotate-sessions must be >= 1 and --annotate-idle-s > 0")
    limits = SessionLimits(max_sessions=args.annotate_sessions, idle_timeout_s=args.annotate_idle_s)
    settings = load_settings(vars(args))
    suffix = f"/?token={args.token}" if args.token else "/"
    print(f"flywheel ui: http://{args.host}:{args.port}{suffix}", flush=True)
    web.run_app(make_app(settings, args.token, limits), host=args.host, port=args.port, print=None,
                access_log_class=PathAccessLogger)
    return 0
