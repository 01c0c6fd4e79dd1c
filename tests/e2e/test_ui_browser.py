"""`flywheel ui` in a real Chromium: the replay shows the stored screenshot with the marker at the
recorded click; the Run view's Plotly charts change in place while data arrives, and follow the
run chosen; hostile inputs get a clear 400.

Data goes into real chDB, reads go through the owner's read-only endpoint (started here, as the
sink would), consumer lag through the real broker of the session fixture.
"""

from __future__ import annotations

import io
import urllib.error
import urllib.request
import uuid
from datetime import datetime, timezone

import pytest
from aiohttp import web
from PIL import Image

from app.ui.server import make_app
from infra.clickhouse.client import make_client
from infra.clickhouse.endpoint import QueryEndpoint
from producers.sandboxes.browser_host import find_chromium
from schemas.blobs import BlobStore
from tests.e2e.browser_support import LoopThread, require_chromium
from infra.runtime.procs import free_port

STEP_COLUMNS = ["event_id", "episode_id", "step_index", "ts", "started_at", "policy", "policy_version",
                "action_type", "action", "thought", "reward", "screenshot_sha256", "screenshot_uri",
                "screen_width", "screen_height", "instruction"]


def _insert_steps(client, store: BlobStore, episode_id: str, n: int, policy: str = "pixel") -> str:
    buf = io.BytesIO()
    Image.new("RGB", (160, 210), (40, 120, 200)).save(buf, "PNG")
    ref = store.put(buf.getvalue(), "image/png", 160, 210)
    now = datetime.now(timezone.utc)
    rows = [[f"{episode_id}:{i}", episode_id, i, now, now, policy, 2, "click",
             '{"type":"click","x":0.25,"y":0.5}', "press the blue button", 0.0, ref.sha256, ref.uri, 160, 210,
             "click it"] for i in range(n)]
    client.insert("steps", rows, column_names=STEP_COLUMNS)
    client.insert("trajectories", [[episode_id, episode_id, "t1", "click-button", policy, 2, 2, n, 0.0, False, now]],
                  column_names=["event_id", "episode_id", "task_id", "task_name", "policy", "policy_version_min",
                                "policy_version_max", "num_steps", "outcome_reward", "success", "started_at"])
    return ref.sha256


@pytest.fixture
def ui(settings):
    require_chromium()
    client = make_client(settings)
    endpoint = QueryEndpoint(settings).start()
    loop = LoopThread()
    port = free_port()
    runner = web.AppRunner(make_app(settings))
    loop.run(runner.setup())
    loop.run(web.TCPSite(runner, "127.0.0.1", port).start())
    yield settings, client, f"http://127.0.0.1:{port}"
    loop.run(runner.cleanup())
    loop.stop()
    endpoint.stop()
    client.close()


@pytest.fixture
def page():
    from playwright.sync_api import sync_playwright  # Playwright: only browser tests need it

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=find_chromium(), headless=True)
        yield browser.new_page(viewport={"width": 1400, "height": 1000})
        browser.close()


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=30) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_replay_shows_the_screenshot_and_the_click_marker(ui, page):
    settings, client, base = ui
    episode_id = f"ep-{uuid.uuid4().hex[:8]}"
    _insert_steps(client, BlobStore(settings.blob_root), episode_id, 3)
    page.goto(f"{base}/?episode={episode_id}")
    page.wait_for_selector("#overlay #marker", timeout=20_000)
    page.wait_for_function("document.getElementById('shot').naturalWidth === 160", timeout=20_000)
    cx, cy = float(page.get_attribute("#marker", "cx")), float(page.get_attribute("#marker", "cy"))
    assert (cx, cy) == (40.0, 105.0)  # 0.25 x 160, 0.5 x 210
    assert "press the blue button" in page.inner_text("#step-info")
    page.click("#next")
    assert "(2/3)" in page.inner_text("#step-label")
    page.screenshot(path=str(settings.data_path / "replay.png"))


CHARTS = ["chart-success", "chart-steps", "chart-losses", "chart-idle", "chart-lag", "chart-staleness"]
STEPS_PER_S = "JSON.stringify((document.getElementById('chart-steps').data || []).map(t => t.y))"


def test_run_view_charts_change_in_place_while_data_arrives(ui, page):
    settings, client, base = ui
    store = BlobStore(settings.blob_root)
    _insert_steps(client, store, "ep-first", 2)
    _insert_steps(client, store, "ep-other-run", 1, policy="lm-r2")
    page.goto(base + "/?run=pixel")  # the run filter: the other run's step is left out
    page.wait_for_function(f"{STEPS_PER_S} === '[[0.033]]'", timeout=20_000)  # 2 steps in minute 0
    for chart in CHARTS:  # every chart is a Plotly graph; empty ones say so
        assert page.evaluate(f"Array.isArray(document.getElementById('{chart}').data)"), chart
    assert "no data yet" in page.inner_text("#chart-success")
    page.evaluate("window.stepsSvg = document.querySelector('#chart-steps .main-svg')")
    _insert_steps(client, store, "ep-second", 5)
    page.wait_for_function(f"{STEPS_PER_S} === '[[0.117]]'", timeout=20_000)  # 7 steps
    assert page.evaluate("document.querySelector('#chart-steps .main-svg') === window.stepsSvg")  # Plotly.react
    assert "7" in page.inner_text("#totals")
    page.select_option("#run", "")  # every run
    page.wait_for_function(f"{STEPS_PER_S} === '[[0.133]]'", timeout=20_000)
    assert sorted(page.eval_on_selector_all("#run option", "os => os.map(o => o.value)")) == ["", "lm-r2", "pixel"]
    page.select_option("#run", "pixel")
    page.click("#nav-episodes")
    page.wait_for_function("document.getElementById('episodes').innerText.includes('ep-second')", timeout=20_000)
    assert "ep-other-run" not in page.inner_text("#episodes")


@pytest.mark.parametrize("path", ["/api/episodes/x'%20OR%201=1", "/api/episodes/%3Cscript%3E",
                                  "/api/episodes?task=..%2F..%2Fetc", "/api/episodes?version=-1",
                                  "/api/episodes?outcome=drop", "/api/episodes/" + "a" * 300,
                                  "/api/episodes?run=x'%20OR%201=1", "/api/run?run=%3Cscript%3E"])
def test_hostile_inputs_get_a_clear_400(ui, path):
    _settings, _client, base = ui
    status, body = _get(base + path)
    assert status == 400, (path, status, body)
    assert body.startswith("flywheel ui: ") and "Traceback" not in body


def test_hostile_input_in_the_page_shows_the_error(ui, page):
    _settings, _client, base = ui
    page.goto(base + "/#episodes")
    page.fill("input[name=task]", "x' OR 1=1 --")
    page.click("#filter button")
    page.wait_for_function("document.getElementById('episodes-error').innerText.includes('task')", timeout=20_000)


def test_unknown_blob_and_episode_are_404(ui):
    _settings, _client, base = ui
    assert _get(base + "/blob/" + "0" * 64)[0] == 404
    assert _get(base + "/blob/..%2F..%2Fetc%2Fpasswd")[0] == 404
    assert _get(base + "/api/episodes/ep-none")[0] == 404


def test_a_token_app_refuses_requests_without_it_and_no_sink_is_a_clear_error(settings):
    loop = LoopThread()
    port = free_port()
    runner = web.AppRunner(make_app(settings, token="t" * 24, open_chdb=False))  # the demo's: reads through a sink
    loop.run(runner.setup())
    loop.run(web.TCPSite(runner, "127.0.0.1", port).start())
    try:
        base = f"http://127.0.0.1:{port}"
        assert _get(base + "/api/episodes")[0] == 401
        assert _get(base + "/api/episodes?token=" + "x" * 24)[0] == 401
        status, body = _get(base + "/api/episodes?token=" + "t" * 24)  # no sink runs: nothing to read
        assert status == 503 and "flywheel sink" in body, body  # not the client's fault: unavailable
    finally:
        loop.run(runner.cleanup())
        loop.stop()
