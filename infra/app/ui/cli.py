"""`flywheel ui`: serve the Run, Episodes and Annotate views on loopback (another address needs --token)."""

from __future__ import annotations

import argparse

from aiohttp import web

from infra.app.ui.server import is_loopback, make_app
from infra.runtime.config import add_arguments
from infra.runtime.errors import UserError
from infra.runtime.settings import Settings, load_settings
from producers.human import SessionLimits


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("ui", help="web app: the live run and episode replay (loopback)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (not loopback: --token required)")
    p.add_argument("--port", type=int, default=8765)
    p.add_argument("--token", default="", help="token every request must carry (?token= or X-Flywheel-Token)")
    p.add_argument("--annotate-sessions", type=int, default=SessionLimits.max_sessions,
                   help="Annotate view: browser sandboxes open at once (a person each)")
    p.add_argument("--annotate-idle-s", type=float, default=SessionLimits.idle_timeout_s,
                   help="Annotate view: seconds without an action before a session is closed (its episode aborted)")
    add_arguments(p, Settings)
    p.set_defaults(func=run)


def check_bind(host: str, token: str) -> None:
    if not is_loopback(host) and len(token) < 16:
        raise UserError(f"binding {host} (not loopback) needs --token of at least 16 characters")


def run(args: argparse.Namespace) -> int:
    check_bind(args.host, args.token)
    if args.annotate_sessions < 1 or args.annotate_idle_s <= 0:
        raise UserError("--annotate-sessions must be >= 1 and --annotate-idle-s > 0")
    limits = SessionLimits(max_sessions=args.annotate_sessions, idle_timeout_s=args.annotate_idle_s)
    settings = load_settings(vars(args))
    suffix = f"/?token={args.token}" if args.token else "/"
    print(f"flywheel ui: http://{args.host}:{args.port}{suffix}", flush=True)
    web.run_app(make_app(settings, args.token, limits), host=args.host, port=args.port, print=None)
    return 0
