"""The analyst endpoint against the attack corpus, on real chDB: over raw HTTP and `flywheel sql`.

Every statement is refused with a clear error, no file is written, no secret comes back; the
token is checked before the body is read; bodies and concurrency are bounded; the docs' reads
still work.
"""

from __future__ import annotations

import base64
import glob
import http.client
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import chdb
import pytest

import infra.clickhouse.endpoint
from infra.clickhouse.endpoint import MAX_BODY, MAX_CONCURRENT, MAX_CONNECTIONS, QueryEndpoint
from infra.clickhouse.query import execute
from infra.clickhouse.client import make_client
from infra.runtime.errors import UserError
from infra.runtime.settings import load_settings
from infra.clickhouse.sql_policy import KNOWN_TABLE_FUNCTIONS, TABLE_FUNCTIONS
from tests.unit.sql_attacks import ALLOWED, ATTACKS, documented_queries

ROOT = Path(__file__).resolve().parents[2]
SECRET = "flywheel-attack-secret-value"


@pytest.fixture
def endpoint(tmp_path, monkeypatch):
    monkeypatch.setenv("FLYWHEEL_ATTACK_CANARY", SECRET)  # what /proc/self/environ would leak
    for f in glob.glob("/tmp/flywheel-attack-*"):
        os.unlink(f)
    settings = load_settings({"data_dir": str(tmp_path)}, env={})
    make_client(settings).close()  # migrations: the flywheel tables and views exist
    ep = QueryEndpoint(settings).start()
    yield settings, ep.endpoint
    ep.stop()


def post(endpoint, sql: str, token: str | None = None, params: str = "") -> tuple[int, bytes]:
    req = urllib.request.Request(f"{endpoint.url}/{params}", data=sql.encode(),
                                 headers={"X-ClickHouse-Key": endpoint.token if token is None else token})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def assert_nothing_leaked_or_written(body: bytes) -> None:
    assert b"root:x:0:0" not in body and SECRET.encode() not in body
    assert glob.glob("/tmp/flywheel-attack-*") == []


def test_every_attack_over_raw_http_is_refused(endpoint):
    _, ep = endpoint
    refused = 0
    for sql in ATTACKS:
        status, body = post(ep, sql)
        assert status >= 400, (sql, status, body[:200])
        assert body.startswith(b"Code: ") and b"Exception" in body, body[:200]
        assert_nothing_leaked_or_written(body)
        refused += 1
    assert refused == len(ATTACKS) >= 40
    # the engine is read-only and limited whatever the policy lets through
    status, body = post(ep, "SELECT name, value FROM system.settings WHERE name IN ('readonly', 'max_execution_time') "
                            "ORDER BY name")
    assert status == 200 and body.split() == [b"max_execution_time", b"30", b"readonly", b"1"]


def test_every_attack_through_flywheel_sql_is_refused(endpoint):
    settings, _ = endpoint
    for sql in ATTACKS:
        with pytest.raises(UserError) as err:
            execute(settings, sql)
        assert "refused" in str(err.value) or "Code:" in str(err.value), str(err.value)
        assert_nothing_leaked_or_written(str(err.value).encode())
    env = {**os.environ, "FLYWHEEL_DATA_DIR": settings.data_dir}
    for sql in ATTACKS[:3] + ["SELECT 1 INTO OUTFILE '/tmp/flywheel-attack-cli'"]:  # the real command, end to end
        out = subprocess.run([sys.executable, "-m", "app.cli", "sql", sql], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 2 and "refused" in out.stderr and "Traceback" not in out.stderr, out.stderr
        assert_nothing_leaked_or_written((out.stdout + out.stderr).encode())


def test_the_documented_reads_still_work(endpoint):
    settings, ep = endpoint
    for sql in ALLOWED + documented_queries():
        if "{n:" in sql:
            continue  # bound parameters: exercised over raw HTTP below
        _, _, how = execute(settings, sql)
        assert how == "endpoint", sql  # ran (the tables are empty: no error is the point)
    status, body = post(ep, "SELECT {n:UInt32} + 1", params="?param_n=41")
    assert status == 200 and body.strip() == b"42"


def test_settings_that_lift_limits_and_other_databases_are_refused(endpoint):
    _, ep = endpoint
    for params in ("?readonly=0", "?max_execution_time=100000", "?allow_introspection_functions=1",
                   "?database=system", "?max_memory_usage=0"):
        status, body = post(ep, "SELECT 1", params=params)
        assert status == 400 and b"ACCESS_DENIED" in body, (params, body)


def test_the_token_is_checked_before_the_body_is_read(endpoint):
    _, ep = endpoint
    conn = http.client.HTTPConnection(ep.host, ep.port, timeout=10)
    conn.putrequest("POST", "/")
    conn.putheader("X-ClickHouse-Key", "wrong")
    conn.putheader("Content-Length", str(10 * MAX_BODY))
    conn.endheaders()  # no body sent: an endpoint that read it first would hang here
    resp = conn.getresponse()
    assert resp.status == 401 and b"AUTHENTICATION_FAILED" in resp.read()
    conn.close()


def test_bodies_and_concurrency_are_bounded(endpoint):
    _, ep = endpoint
    # headers only: the refusal comes before the body (a client still sending it may see a broken pipe)
    with socket.create_connection((ep.host, ep.port), timeout=10) as sock:
        sock.sendall(f"POST / HTTP/1.1\r\nHost: x\r\nX-ClickHouse-Key: {ep.token}\r\n"
                     f"Content-Length: {MAX_BODY + 1}\r\n\r\n".encode())
        assert sock.recv(64).startswith(b"HTTP/1.1 413")
    results: list[int] = []
    # ~2 s each: sum() needs the sleeps evaluated (count() of the subquery skipped them: 0.1 s in all,
    # so the 503 depended on the requests happening to overlap)
    slow = "SELECT sum(sleepEachRow(0.5)) FROM numbers(4)"

    def run():
        results.append(post(ep, slow)[0])

    threads = [threading.Thread(target=run) for _ in range(MAX_CONCURRENT + 3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert results.count(503) >= 1 and results.count(200) >= 1, results


def test_bound_identifiers_cannot_name_a_table(endpoint):
    _, ep = endpoint
    status, body = post(ep, "SELECT query FROM {d:Identifier}.{t:Identifier}",
                        params="?param_d=system&param_t=processes")
    assert status == 400 and b"parameters carry values" in body, body
    status, body = post(ep, "SELECT 1", params="?default_format=CSV%20INTO%20OUTFILE")
    assert status == 400 and b"not a format name" in body, body


def test_a_non_ascii_token_is_refused_not_dropped(endpoint):
    _, ep = endpoint
    auth = base64.b64encode("default:\u00e9t\u00e9".encode()).decode()
    req = urllib.request.Request(f"{ep.url}/", data=b"SELECT 1", headers={"Authorization": f"Basic {auth}"})
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=10)
    assert err.value.code == 401


def test_a_trickling_body_is_cut_off_without_holding_a_query_slot(endpoint, monkeypatch):
    _, ep = endpoint
    monkeypatch.setattr(infra.clickhouse.endpoint, "SOCKET_TIMEOUT_S", 2.0)
    slow = []
    for _ in range(MAX_CONCURRENT + 1):
        sock = socket.create_connection((ep.host, ep.port), timeout=10)
        sock.sendall(f"POST / HTTP/1.1\r\nHost: x\r\nX-ClickHouse-Key: {ep.token}\r\n"
                     "Content-Length: 100\r\n\r\nSELECT".encode())
        slow.append(sock)
    assert post(ep, "SELECT 42") == (200, b"42\n")  # the trickling senders hold no slot
    started = time.monotonic()
    for sock in slow:
        sock.sendall(b" 1")  # still trickling, still short of 100 bytes
        assert sock.recv(64).startswith(b"HTTP/1.1 408"), "a body that never completes is cut off"
        sock.close()
    assert time.monotonic() - started < 10


def test_connections_are_bounded(endpoint):
    _, ep = endpoint
    idle = [socket.create_connection((ep.host, ep.port), timeout=10) for _ in range(MAX_CONNECTIONS)]
    time.sleep(0.5)
    extra = socket.create_connection((ep.host, ep.port), timeout=10)
    assert extra.recv(64).startswith(b"HTTP/1.1 503")
    extra.close()
    for sock in idle:
        sock.close()
    deadline = time.monotonic() + 10
    while status_or_refused(ep) != 200:  # the handlers see EOF and give their places back
        assert time.monotonic() < deadline
        time.sleep(0.2)


def status_or_refused(ep) -> int:
    """A query's HTTP status, 0 where the endpoint, still at its bound, closed the connection while
    the request was being sent (a broken pipe: under load the handlers see the EOFs later)."""
    try:
        return post(ep, "SELECT 1")[0]
    except urllib.error.URLError:
        return 0


def test_flywheel_sql_against_a_server_url_applies_the_policy_client_side(endpoint):
    """The endpoint speaks ClickHouse's HTTP protocol as a read-only user: it stands in for a server."""
    settings, ep = endpoint
    server = load_settings({"data_dir": settings.data_dir, "clickhouse_url": ep.url,
                            "clickhouse_password": ep.token}, env={})
    for sql in ATTACKS:
        with pytest.raises(UserError, match="refused by the readonly SQL policy"):
            execute(server, sql)
    columns, rows, how = execute(server, "SELECT name FROM system.tables WHERE database = 'flywheel' AND name = 'steps'")
    assert how == "server" and rows == [("steps",)], (columns, rows)
    assert_nothing_leaked_or_written(b"")


def test_every_table_function_of_the_engine_is_known_to_the_policy():
    names = chdb.query("SELECT lower(name) FROM system.table_functions", "CSV").bytes().decode().split()
    unknown = {n.strip('"') for n in names} - KNOWN_TABLE_FUNCTIONS - TABLE_FUNCTIONS
    assert not unknown, f"new table functions: add them to sql_policy.KNOWN_TABLE_FUNCTIONS: {sorted(unknown)}"
