"""`flywheel schemas export DIR`: write the JSON Schema of every event type (the public contract)."""

from __future__ import annotations

import argparse

from infra.runtime.errors import UserError
from schemas.export import export_schemas


def cmd_export(args: argparse.Namespace) -> int:
    try:
        paths = export_schemas(args.dir)
    except OSError as exc:
        raise UserError(f"cannot write schemas to {args.dir}: {exc.strerror or exc}") from None
    for path in paths:
        print(path)
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("schemas", help="event schemas: export JSON Schema")
    sub = p.add_subparsers(dest="schemas_command", metavar="SUBCOMMAND", required=True)
    e = sub.add_parser("export", help="write one JSON Schema per event type into DIR")
    e.add_argument("dir", metavar="DIR", help="output folder (created if missing)")
    e.set_defaults(func=cmd_export)
