"""`flywheel sql`: run one read where the data is, print it as a table, CSV or JSON.

Where: the ClickHouse server when one is configured; else the process owning embedded chDB
(the sink) through its local read-only endpoint; else chDB opened here (see infra.clickhouse.client).
Every path applies the same policy (infra.clickhouse.sql_policy): the statement must be a read of the
flywheel database, and only the text the policy rebuilt runs. Against embedded chDB the engine
also runs it with ``readonly=1`` and the policy's limits (the endpoint does the same on its side).
Against a server the client connects without DDL; a user that may still change settings gets
``readonly=1`` and the limits as query settings, a read-only user (the ``readonly`` profile,
docs/analytics.md) runs under its profile, which the server enforces and we cannot change.
"""

from __future__ import annotations

import csv
import io
import json
from datetime import date, datetime
from typing import Any, Sequence

from infra.clickhouse.client import query_client
from infra.runtime.errors import UserError
from infra.runtime.settings import Settings
from infra.clickhouse.sql_policy import ENGINE_LIMITS, SqlRefused, check

FORMATS = ("table", "csv", "json")


def execute(settings: Settings, sql: str, params: dict | None = None,
            open_here: bool = True) -> tuple[list[str], list[tuple], str]:
    """(column names, rows, where it ran); UserError for a refused statement or an engine error.
    ``params``: bind parameters (``{name:Type}`` in ``sql``); ``open_here``: see ``query_client``."""
    try:
        sql = check(sql, settings.clickhouse_database)
    except SqlRefused as exc:
        raise UserError(f"refused by the readonly SQL policy: {exc}") from None
    client, how = query_client(settings, open_here)
    try:
        limits = {"chdb": ENGINE_LIMITS, "endpoint": None, "server": server_limits(client.server_settings)}[how]
        result = client.query(sql, parameters=params, settings=limits)
        return list(result.column_names), list(result.result_rows), how
    except Exception as exc:
        if isinstance(exc, UserError):
            raise
        message = str(exc)
        idx = message.find("Code: ")
        raise UserError((message[idx:] if idx >= 0 else message).splitlines()[0][:500]) from None
    finally:
        client.close()


def server_limits(server_settings: dict[str, Any]) -> dict[str, str] | None:
    """The engine limits a server user can still be given: all for readonly=0, none for readonly=1.

    ``server_settings`` is clickhouse-connect's view of the user's ``system.settings``. A readonly=1
    user cannot change any setting (the server refuses even readonly=1 again); readonly=2 may change
    settings but not ``readonly`` itself.
    """
    current = server_settings.get("readonly")
    level = getattr(current, "value", "0")
    if level == "1":
        return None
    if level == "2":
        return {k: v for k, v in ENGINE_LIMITS.items() if k != "readonly"}
    return ENGINE_LIMITS


def _cell(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, datetime):
        return value.isoformat(sep=" ", timespec="milliseconds").replace("+00:00", "")
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(value, default=str)
    return str(value)


def render(columns: Sequence[str], rows: Sequence[Sequence[Any]], fmt: str = "table") -> str:
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(columns)
        writer.writerows([[_cell(v) if v is not None else "" for v in row] for row in rows])
        return buf.getvalue().rstrip("\n")
    if fmt == "json":
        return json.dumps([dict(zip(columns, row)) for row in rows], default=str, indent=1)
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    numeric = [all(isinstance(row[i], (int, float)) and not isinstance(row[i], bool) for row in rows) and rows
               for i in range(len(columns))]

    def line(values: Sequence[str]) -> str:
        return "  ".join(v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric)).rstrip()

    out = [line(list(columns)), "  ".join("-" * w for w in widths)]
    out += [line(r) for r in cells]
    out.append(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")
    return "\n".join(out)
