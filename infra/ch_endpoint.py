"""Local SQL endpoint of the process that owns the embedded chDB data directory.

chDB locks its data directory: a second process cannot open it, not even read-only. So the
owner (``flywheel sink``) serves a small subset of ClickHouse's HTTP interface on 127.0.0.1:
``POST /`` with the query in the body and/or the ``query`` parameter, ``database``,
``default_format``, ``param_<name>`` bind parameters and any query-level setting as a URL
parameter; ``GET /ping``. That subset is what clickhouse-connect's HTTP client speaks, so a
reader gets an ordinary clickhouse-connect client (``endpoint_client``), and ``curl`` works too.

Each request runs on its own chDB connection inside the owner's engine with ``readonly=2``:
analysts can read everything (and change per-query settings) but cannot write or alter tables.
The address and a random token are written to ``<data_dir>/run/chdb-endpoint.json`` (mode
0600); requests must present the token as the password (basic auth or X-ClickHouse-Key).
"""

from __future__ import annotations

import base64
import json
import logging
import os
import secrets
import threading
import urllib.request
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlparse

import chdb
import clickhouse_connect
from clickhouse_connect.driver._backend.chdb_backend import CHDB_TRANSPORT_SETTINGS

from infra.settings import Settings

log = logging.getLogger("flywheel.ch_endpoint")

# URL parameters that steer the transport, never settings for the engine.
_TRANSPORT = set(CHDB_TRANSPORT_SETTINGS) | {"query", "default_format", "user", "password", "readonly"}


def endpoint_file(settings: Settings) -> Path:
    return settings.data_path / "run" / "chdb-endpoint.json"


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int
    token: str
    pid: int

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"


def _engine_error(exc: Exception) -> tuple[str, str]:
    """(code, message) from a chDB error text ``... Code: 60. DB::Exception: ...``."""
    text = str(exc)
    idx = text.find("Code: ")
    message = text[idx:] if idx >= 0 else text
    code = message[6:].split(".", 1)[0] if idx >= 0 else "1"
    return (code if code.isdigit() else "1"), message.strip()


class _Handler(BaseHTTPRequestHandler):
    server: "_Server"
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):  # the sink's log is for the pipeline, not each query
        log.debug("query endpoint: " + fmt, *args)

    def _authorised(self) -> bool:
        key = self.headers.get("X-ClickHouse-Key")
        auth = self.headers.get("Authorization", "")
        if auth.startswith("Basic "):
            try:
                key = base64.b64decode(auth[6:]).decode().partition(":")[2]
            except ValueError:
                return False
        return key is not None and secrets.compare_digest(key, self.server.token)

    def _reply(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):  # noqa: N802 - http.server naming
        if urlparse(self.path).path == "/ping":
            self._reply(200, b"Ok.\n")
        else:
            self._query(b"")

    def do_POST(self):  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        self._query(self.rfile.read(length) if length else b"")

    def _query(self, body: bytes) -> None:
        if not self._authorised():
            self._reply(401, b"Code: 516. DB::Exception: flywheel endpoint: wrong or missing token. (AUTHENTICATION_FAILED)\n",
                        {"X-ClickHouse-Exception-Code": "516"})
            return
        params = dict(parse_qsl(urlparse(self.path).query, keep_blank_values=True))
        sql = " ".join(p for p in (params.get("query", ""), body.decode("utf-8", "replace")) if p.strip())
        fmt = params.get("default_format") or "TabSeparated"
        binds = {k[6:]: v for k, v in params.items() if k.startswith("param_")}
        engine_settings = {k: v for k, v in params.items() if k not in _TRANSPORT and not k.startswith("param_")}
        engine_settings["readonly"] = "2"  # last: a client cannot lift it
        try:
            conn = chdb.connect(f"{self.server.chdb_path}?{urlencode(engine_settings)}")
            try:
                if params.get("database"):
                    conn.query(f"USE `{params['database']}`")
                result = conn.query(sql, fmt, params=binds).bytes()
            finally:
                conn.close()
        except Exception as exc:  # the engine's error goes back to the caller, as ClickHouse does
            code, message = _engine_error(exc)
            self._reply(500, (message + "\n").encode(), {"X-ClickHouse-Exception-Code": code})
            return
        summary = json.dumps({"read_rows": "0", "written_rows": "0"})
        self._reply(200, result, {
            "Content-Type": "text/plain; charset=UTF-8", "X-ClickHouse-Format": fmt,
            "X-ClickHouse-Timezone": "UTC", "X-ClickHouse-Summary": summary,
        })


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    chdb_path: str
    token: str


class QueryEndpoint:
    """Serve read-only SQL for the chDB directory this process owns; ``stop()`` removes the file."""

    def __init__(self, settings: Settings, port: int = 0) -> None:
        self._file = endpoint_file(settings)
        try:
            self._server = _Server(("127.0.0.1", port), _Handler)
        except OSError as exc:
            log.warning("query port %d unavailable (%s); using a free port", port, exc)
            self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.chdb_path = os.path.realpath(settings.chdb_path)  # chDB matches paths literally
        self._server.token = secrets.token_urlsafe(24)
        host, bound = self._server.server_address[:2]
        self.endpoint = Endpoint(str(host), int(bound), self._server.token, os.getpid())
        self._thread = threading.Thread(target=self._server.serve_forever, name="chdb-endpoint", daemon=True)

    def start(self) -> "QueryEndpoint":
        self._thread.start()
        self._file.parent.mkdir(parents=True, exist_ok=True)
        tmp = self._file.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump(self.endpoint.__dict__, fh)
        os.replace(tmp, self._file)
        log.info("read-only SQL endpoint on %s (address in %s)", self.endpoint.url, self._file)
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        current = read_endpoint_file(self._file)
        if current is not None and current.pid == os.getpid():
            self._file.unlink(missing_ok=True)


def read_endpoint_file(path: Path) -> Endpoint | None:
    try:
        return Endpoint(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def find_endpoint(settings: Settings, timeout: float = 2.0) -> Endpoint | None:
    """The owner's endpoint if its process is alive and answers ``/ping``; else None."""
    endpoint = read_endpoint_file(endpoint_file(settings))
    if endpoint is None or not _alive(endpoint.pid):
        return None
    try:
        with urllib.request.urlopen(endpoint.url + "/ping", timeout=timeout) as resp:
            return endpoint if resp.status == 200 else None
    except OSError:
        return None


def endpoint_client(endpoint: Endpoint, database: str):
    """An ordinary clickhouse-connect HTTP client talking to the owner's endpoint."""
    return clickhouse_connect.get_client(
        host=endpoint.host, port=endpoint.port, username="default", password=endpoint.token,
        database=database, compress=False, autogenerate_session_id=False,
    )
