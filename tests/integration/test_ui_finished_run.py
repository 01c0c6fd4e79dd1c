"""A finished run is browsable with `flywheel ui` alone: with no sink answering, the UI reads the
embedded chDB data directly, as `flywheel sql` does, and frees the directory after each read (a
sink started later can still lock it). Real chDB; no broker needed."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone

from aiohttp.test_utils import TestClient, TestServer

from app.ui.server import make_app
from infra.clickhouse.client import make_client
from infra.clickhouse.endpoint import find_endpoint
from infra.runtime.settings import load_settings

TOKEN = "t" * 24
OPENS = ("from infra.clickhouse.client import make_client; from infra.runtime.settings import load_settings; "
         "c = make_client(load_settings({'data_dir': %r})); print(c.query('SELECT count() FROM trajectories').result_rows);"
         " c.close()")


def _finished_run(settings, episode_id: str, policy: str) -> None:
    """A run's rows written and its writer gone, as after `flywheel demo` ended."""
    client = make_client(settings)
    now = datetime.now(timezone.utc)
    client.insert("trajectories", [[episode_id, episode_id, "t1", "click-button", policy, 3, 3, 2, 1.0, True, now]],
                  column_names=["event_id", "episode_id", "task_id", "task_name", "policy", "policy_version_min",
                                "policy_version_max", "num_steps", "outcome_reward", "success", "started_at"])
    client.insert("steps", [[f"{episode_id}:{i}", episode_id, i, now, now, policy, 3, "click",
                             '{"type":"click","x":0.5,"y":0.5}', "", 0.0, "0" * 64, "", 160, 210, "click it"]
                            for i in range(2)],
                  column_names=["event_id", "episode_id", "step_index", "ts", "started_at", "policy", "policy_version",
                                "action_type", "action", "thought", "reward", "screenshot_sha256", "screenshot_uri",
                                "screen_width", "screen_height", "instruction"])
    client.close()


def test_a_finished_run_is_browsable_with_the_ui_alone_and_the_directory_stays_free(tmp_path):
    settings = load_settings({"data_dir": str(tmp_path)})
    _finished_run(settings, "ep-done-1", "pixel-r1")
    assert find_endpoint(settings) is None  # no sink: nothing serves the data

    async def go(open_chdb: bool):
        headers = {"X-Flywheel-Token": TOKEN}
        async with TestClient(TestServer(make_app(settings, TOKEN, open_chdb=open_chdb))) as client:
            out = []
            for path in ("/api/runs", "/api/episodes?run=pixel-r1&version=3", "/api/episodes/ep-done-1"):
                resp = await client.get(path, headers=headers)
                out.append((resp.status, await (resp.json() if resp.status == 200 else resp.text())))
            return out

    (runs_status, runs), (list_status, episodes), (one_status, episode) = asyncio.run(go(True))
    assert (runs_status, list_status, one_status) == (200, 200, 200), (runs, episodes, episode)
    assert [r["run"] for r in runs] == ["pixel-r1"] and runs[0]["episodes"] == 1
    assert [e["episode_id"] for e in episodes] == ["ep-done-1"] and episodes[0]["success"] in (True, 1)
    assert [s["step_index"] for s in episode["steps"]] == [0, 1] and episode["steps"][0]["marker"]["kind"] == "point"

    # the UI process is still alive and idle: a sink (another process) can open the directory now
    other = subprocess.run([sys.executable, "-c", OPENS % str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert other.returncode == 0 and "[(1,)]" in other.stdout, other.stderr[-800:]

    # the demo's UI (started before its sink) never opens the directory: a clear 503 instead
    statuses = asyncio.run(go(False))
    assert all(status == 503 and "flywheel sink" in body for status, body in statuses), statuses


HOLDS = ("from infra.clickhouse.client import make_client; from infra.runtime.settings import load_settings; "
         "import sys; c = make_client(load_settings({'data_dir': %r})); print('held', flush=True); "
         "sys.stdin.read(); c.close()")


def test_a_directory_another_process_holds_is_a_503_then_browsable_once_it_is_free(tmp_path):
    """Another process holding the data directory with no endpoint (a sink starting, `flywheel sql`,
    another UI mid-read): the UI's reads answer 503 naming it, not a 500, and read once it is free."""
    settings = load_settings({"data_dir": str(tmp_path)})
    _finished_run(settings, "ep-done-2", "pixel-r2")

    async def runs():
        async with TestClient(TestServer(make_app(settings, TOKEN))) as client:
            resp = await client.get("/api/runs", headers={"X-Flywheel-Token": TOKEN})
            return resp.status, await resp.text()

    holder = subprocess.Popen([sys.executable, "-c", HOLDS % str(tmp_path)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        status, text = asyncio.run(runs())
        assert status == 503 and "open in another process" in text, (status, text)
    finally:
        holder.communicate("", timeout=60)
    status, text = asyncio.run(runs())
    assert status == 200 and "pixel-r2" in text, (status, text)


def test_an_opener_waits_out_a_brief_hold_a_sink_starting_beside_a_ui_read(tmp_path):
    """A sink starting while `flywheel ui` holds the directory for one read gets it once the read
    ends (``HELD_WAIT_S``), rather than failing its start; a hold that stays is still an error."""
    settings = load_settings({"data_dir": str(tmp_path)})
    _finished_run(settings, "ep-done-3", "pixel-r3")
    holder = subprocess.Popen([sys.executable, "-c", HOLDS % str(tmp_path)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        release = threading.Timer(1.0, holder.stdin.close)  # the holder's read ends a second later
        release.start()
        t0 = time.monotonic()
        client = make_client(settings)
        try:
            assert time.monotonic() - t0 >= 0.5  # it did wait for the holder
            assert client.query("SELECT count() FROM trajectories").result_rows[0][0] >= 1
        finally:
            client.close()
    finally:
        holder.wait(timeout=60)
