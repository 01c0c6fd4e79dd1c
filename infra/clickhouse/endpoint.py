"""Local SQL endpoint of the process that owns the embedded chDB data directory.

chDB locks its data directory: a second process cannot open it, not even read-only. So the
owner (``flywheel sink``) serves a small subset of ClickHouse's HTTP interface on 127.0.0.1:
``POST /`` with the query in the body and/or the ``query`` parameter, ``database``,
``default_format``, ``param_<name>`` bind parameters and any query-level setting as a URL
parameter; ``GET /ping``. That subset is what clickhouse-connect's HTTP client speaks, so a
reader gets an ordinary clickhouse-connect client (``endpoint_client``), and ``curl`` works too.

Analysts read the flywheel database and nothing else (infra.clickhouse.sql_policy): the token is checked
before the body is read (basic auth password or X-ClickHouse-Key; the address and a random token
are in ``<data_dir>/run/chdb-endpoint.json``, mode 0600); the body is bounded (``MAX_BODY``) and
must arrive within ``SOCKET_TIMEOUT_S`` in all, before it may take one of the ``MAX_CONCURRENT``
query slots (503 beyond), so a slow sender never holds one; at most ``MAX_CONNECTIONS`` connections
are served at once (503 beyond, so handler threads are bounded too); the statement must pass
``sql_policy.check`` and only the rebuilt text runs, on its own chDB connection with
``readonly=1`` and the time and memory limits of ``sql_policy.ENGINE_LIMITS``; URL settings are
limited to the output-format ones clickhouse-connect sends. A refusal is an HTTP 4xx (503 when
full) with one line saying why. Nothing is written: the engine is read-only and the policy
refuses INTO OUTFILE and every table function that could write.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import re
import secrets
import threading
import time
import urllib.request
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlparse

import chdb
import clickhouse_connect
from clickhouse_connect.driver._backend.chdb_backend import CHDB_TRANSPORT_SETTINGS

from infra.runtime.settings import Settings
from infra.clickhouse.sql_policy import ENGINE_LIMITS, SqlRefused, check, check_database

log = logging.getLogger("flywheel.ch_endpoint")

# URL parameters that steer the transport: dropped, never settings for the engine.
_TRANSPORT = set(CHDB_TRANSPORT_SETTINGS) | {
    "query", "default_format", "user", "password", "database", "query_id", "session_id", "session_timeout",
    "session_check", "compress", "decompress", "enable_http_compression", "wait_end_of_query",
    "send_progress_in_http_headers", "http_headers_progress_interval_ms", "client_protocol_version",
    "cancel_http_readonly_queries_on_client_close"}
# settings a client may pass: how results are formatted, nothing that lifts a limit
_CLIENT_SETTINGS = {"date_time_input_format", "date_time_output_format", "cast_string_to_dynamic_use_inference",
                    "output_format_json_quote_64bit_integers", "output_format_json_quote_denormals",
                    "output_format_native_encode_types_in_binary_format", "output_format_decimal_trailing_zeros"}
MAX_BODY = 1 << 20
MAX_CONCURRENT = 4
MAX_CONNECTIONS = 32
SOCKET_TIMEOUT_S = 15.0
_FORMAT = re.compile(r"[A-Za-z][A-Za-z0-9]*")


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
    timeout = SOCKET_TIMEOUT_S  # a client that stalls mid-request loses its connection

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
        # bytes: compare_digest raises on non-ASCII str, which would turn a bad token into a dropped connection
        return key is not None and secrets.compare_digest(key.encode(), self.server.token.encode())

    def _reply(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _refuse(self, status: int, code: str, message: str) -> None:
        self.close_connection = True
        self._reply(status, f"Code: {code}. DB::Exception: flywheel endpoint: {message}\n".encode(),
                    {"X-ClickHouse-Exception-Code": code, "Connection": "close"})

    def do_GET(self):  # noqa: N802 - http.server naming
        if urlparse(self.path).path == "/ping":
            self._reply(200, b"Ok.\n")
        else:
            self._guarded(read_body=False)

    def do_POST(self):  # noqa: N802
        self._guarded(read_body=True)

    def _guarded(self, read_body: bool) -> None:
        """Token, then size, then the body (within a deadline), then a query slot: in that order."""
        if not self._authorised():
            self._refuse(401, "516", "wrong or missing token. (AUTHENTICATION_FAILED)")
            return
        if self.headers.get("Transfer-Encoding"):
            self._refuse(411, "497", "send the statement with a Content-Length, not chunked")
            return
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if length < 0 or length > MAX_BODY:
            self._refuse(413, "497", f"request body over {MAX_BODY} bytes")
            return
        body = self._read_body(length, time.monotonic() + SOCKET_TIMEOUT_S) if read_body and length else b""
        if body is None:
            self._refuse(408, "159", f"the request body did not arrive within {SOCKET_TIMEOUT_S:.0f} s")
            return
        if not self.server.slots.acquire(blocking=False):
            self._refuse(503, "202", f"too many queries at once (at most {MAX_CONCURRENT}); retry shortly")
            return
        try:
            self._query(body)
        finally:
            self.server.slots.release()

    def _read_body(self, length: int, deadline: float) -> bytes | None:
        """``length`` bytes by ``deadline`` (a sender trickling bytes is cut off), else None."""
        chunks, left = [], length
        try:
            while left:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self.connection.settimeout(remaining)
                chunk = self.rfile.read1(min(left, 1 << 16))
                if not chunk:
                    return None
                chunks.append(chunk)
                left -= len(chunk)
        except (TimeoutError, OSError):
            return None
        finally:
            self.connection.settimeout(SOCKET_TIMEOUT_S)
        return b"".join(chunks)

    def _query(self, body: bytes) -> None:
        params = dict(parse_qsl(urlparse(self.path).query, keep_blank_values=True))
        fmt = params.get("default_format") or "TabSeparated"
        binds = {k[6:]: v for k, v in params.items() if k.startswith("param_")}
        asked = {k: v for k, v in params.items() if k not in _TRANSPORT and not k.startswith("param_")}
        try:
            refused = sorted(set(asked) - _CLIENT_SETTINGS)
            if refused:
                raise SqlRefused(f"setting(s) {', '.join(refused)} cannot be set here")
            check_database(params.get("database"), self.server.database)
            if not _FORMAT.fullmatch(fmt):
                raise SqlRefused(f"default_format {fmt!r} is not a format name")
            sql = check(" ".join(p for p in (params.get("query", ""), body.decode("utf-8", "replace")) if p.strip()))
        except SqlRefused as exc:
            self._refuse(400, "497", f"{exc}. (ACCESS_DENIED)")
            return
        engine_settings = {**asked, **ENGINE_LIMITS}  # ENGINE_LIMITS last, readonly=1 last of all
        try:
            conn = chdb.connect(f"{self.server.chdb_path}?{urlencode(engine_settings)}")
            try:
                conn.query(f"USE `{self.server.database}`")
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
    database: str
    slots: threading.BoundedSemaphore
    connections: threading.BoundedSemaphore

    def process_request(self, request, client_address):
        """One thread per connection, at most ``MAX_CONNECTIONS``; beyond that a 503 and close."""
        if not self.connections.acquire(blocking=False):
            try:
                request.settimeout(1.0)
                request.sendall(b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Length: 0\r\n"
                                b"X-ClickHouse-Exception-Code: 202\r\n\r\n")
            except OSError:
                pass
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.connections.release()


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
        self._server.database = settings.clickhouse_database
        self._server.slots = threading.BoundedSemaphore(MAX_CONCURRENT)
        self._server.connections = threading.BoundedSemaphore(MAX_CONNECTIONS)
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
