"""ClickHouse clients and DDL migrations.

``make_client(settings)`` returns a clickhouse-connect client: a ClickHouse server over HTTP when
``settings.clickhouse_url`` is set, else the embedded engine (chDB) in ``settings.chdb_path``.
Either way the database exists and every migration under ``infra/clickhouse/sql`` has been applied.

chDB lets one process open a data directory (it locks ``<path>/status``). The process that owns
it (``flywheel sink``) serves read-only SQL on 127.0.0.1 through ``infra.clickhouse.endpoint``;
``query_client(settings)`` picks whichever of server, owner endpoint or direct chDB is usable,
so analysts query the same way whether or not the pipeline is running.

Migrations: ``infra/clickhouse/sql/NNN_name.sql``, applied in order, each recorded in ``_migrations``.
Every statement is idempotent (IF NOT EXISTS / OR REPLACE), so a migration interrupted half way
is simply applied again.
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass
from importlib import resources
from urllib.parse import urlparse

import clickhouse_connect
from clickhouse_connect.driver.client import Client

from infra.runtime.errors import UserError
from infra.runtime.settings import Settings

log = logging.getLogger("flywheel.clickhouse")

MIGRATIONS_TABLE = "_migrations"
_MIGRATION_NAME = re.compile(r"^(\d+)_[\w-]+\.sql$")


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    statements: tuple[str, ...]


def split_statements(sql: str) -> list[str]:
    """Split a migration file on ``;`` at line ends; ``--`` comment lines are dropped."""
    lines = [ln for ln in sql.splitlines() if not ln.strip().startswith("--")]
    return [s.strip() for s in re.split(r";\s*(?:\n|$)", "\n".join(lines)) if s.strip()]


def load_migrations() -> list[Migration]:
    out = []
    for entry in resources.files("infra.clickhouse").joinpath("sql").iterdir():
        m = _MIGRATION_NAME.match(entry.name)
        if m:
            out.append(Migration(int(m.group(1)), entry.name, tuple(split_statements(entry.read_text()))))
    out.sort(key=lambda mig: mig.version)
    versions = [mig.version for mig in out]
    if len(set(versions)) != len(versions):
        raise RuntimeError(f"two migrations share a version number: {versions}")
    return out


def migrate(client: Client) -> list[str]:
    """Apply the migrations not yet recorded; returns the names applied now."""
    client.command(
        f"CREATE TABLE IF NOT EXISTS {MIGRATIONS_TABLE} (version UInt32, name String, "
        "applied_at DateTime64(3, 'UTC') DEFAULT now64(3)) ENGINE = ReplacingMergeTree ORDER BY version"
    )
    done = {row[0] for row in client.query(f"SELECT version FROM {MIGRATIONS_TABLE} FINAL").result_rows}
    applied = []
    for mig in load_migrations():
        if mig.version in done:
            continue
        for statement in mig.statements:
            client.command(statement)
        client.insert(MIGRATIONS_TABLE, [[mig.version, mig.name]], column_names=["version", "name"])
        applied.append(mig.name)
        log.info("applied migration %s (%d statements)", mig.name, len(mig.statements))
    return applied


def _server_client(settings: Settings, database: str | None) -> Client:
    url = urlparse(settings.clickhouse_url)
    try:
        return clickhouse_connect.get_client(
            host=url.hostname, port=url.port or (8443 if url.scheme == "https" else 8123),
            secure=url.scheme == "https", username=settings.clickhouse_user,
            password=settings.clickhouse_password, database=database or "",
        )
    except Exception as exc:
        raise UserError(
            f"cannot reach ClickHouse at {settings.clickhouse_url} ({type(exc).__name__}: {exc}); "
            "check FLYWHEEL_CLICKHOUSE_URL, or leave it empty to use embedded chDB"
        ) from None


# How chDB refuses a data directory another process holds: the lock's own message, or (chDB 4)
# only "Error initializing EmbeddedServer", the lock's message going to stderr
HELD_ELSEWHERE = ("Cannot lock file", "Another server instance", "Error initializing EmbeddedServer")


HELD_WAIT_S = 5.0  # how long an opener waits out another process's brief hold (a `flywheel ui` read: ~60 ms)


def _chdb_client(settings: Settings, wait_s: float = HELD_WAIT_S) -> Client:
    """Open the chDB directory. Another process may hold it for one read (``query_client`` opens it
    per read where no sink runs): wait that out for up to ``wait_s``, so a sink starting beside a
    finished run's `flywheel ui` still gets the directory; a holder that stays is a clear error."""
    path = settings.chdb_path
    path.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return clickhouse_connect.get_client(interface="chdb", path=str(path))
        except Exception as exc:
            if not any(sign in str(exc) for sign in HELD_ELSEWHERE):
                raise
            if time.monotonic() < deadline:
                time.sleep(0.1)
                continue
            raise UserError(
                f"the chDB data directory {path} is open in another process (one process at a time; "
                f"chDB: {str(exc).splitlines()[0][-160:]}); while `flywheel sink` owns it, query through "
                "`flywheel sql` or infra.clickhouse.client.query_client"
            ) from None


def make_client(settings: Settings, *, migrate_schema: bool = True) -> Client:
    """A client on ``settings.clickhouse_database``, created and migrated (server or chDB)."""
    db = settings.clickhouse_database
    if settings.clickhouse_url:
        client = _server_client(settings, None)
    else:
        client = _chdb_client(settings)
    client.command(f"CREATE DATABASE IF NOT EXISTS `{db}`")
    client.database = db
    if migrate_schema:
        migrate(client)
    return client


NO_OWNER = "no ClickHouse to read: start `flywheel sink` (it owns the data and serves reads)"


def query_client(settings: Settings, open_here: bool = True) -> tuple[Client, str]:
    """A client for reading: (client, how). ``how`` is "server", "endpoint" or "chdb".

    With embedded chDB, a running owner (the sink) is asked over its local endpoint; only when
    no owner answers is the data directory opened here (a finished run's data, read with no
    sink), unless ``open_here`` is False: a long-lived reader that starts before the sink (the
    demo's UI) must not hold the directory the sink is about to lock. Close the client after
    the read: chDB frees the directory when its last connection in the process closes.
    """
    if settings.clickhouse_url:  # no DDL: an analyst's read-only user may not even CREATE DATABASE IF NOT EXISTS
        return _server_client(settings, settings.clickhouse_database), "server"
    # local: loads chdb, needed only on this path
    from infra.clickhouse.endpoint import endpoint_client, find_endpoint

    endpoint = find_endpoint(settings)
    if endpoint is not None:
        return endpoint_client(endpoint, settings.clickhouse_database), "endpoint"
    if not open_here:
        raise UserError(NO_OWNER)
    return make_client(settings), "chdb"
