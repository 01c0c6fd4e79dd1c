"""The Annotate page in Chromium, as a person who double-clicks Start: one session opens, not two
(the second would hold a sandbox nobody can reach until the idle timeout). The session route is
answered by the test, so no sandbox starts."""

from __future__ import annotations

import json

from aiohttp import web

from infra.app.ui.server import make_app
from infra.runtime.procs import free_port
from infra.runtime.settings import load_settings
from producers.sandboxes.browser_host import find_chromium
from tests.e2e.browser_support import LoopThread, require_chromium

VIEW = {"session": "s1", "step": 0, "screenshot_sha256": "", "width": 160, "height": 210, "instruction": "click",
        "done": False, "status": "", "reason": "", "reward": 0.0, "success": False, "episode_id": ""}


def test_a_double_submitted_start_opens_one_session():
    from playwright.sync_api import sync_playwright  # Playwright: only browser tests need it

    require_chromium()
    loop, port = LoopThread(), free_port()
    runner = web.AppRunner(make_app(load_settings({})))
    loop.run(runner.setup())
    loop.run(web.TCPSite(runner, "127.0.0.1", port).start())
    opened = []

    def answer(route):
        opened.append(route.request.post_data)
        route.fulfill(status=200, content_type="application/json", body=json.dumps(VIEW))

    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=find_chromium(), headless=True)
            page = browser.new_page()
            page.route("**/api/annotate/sessions", answer)
            page.goto(f"http://127.0.0.1:{port}/")
            page.evaluate("""() => { const f = document.getElementById('annotate-start');
              f.elements.name.value = 'alice'; f.requestSubmit(); f.requestSubmit(); }""")
            page.wait_for_function("() => document.getElementById('annotate-status').textContent === 'step 0'")
            page.wait_for_timeout(300)  # a second request, if sent, has arrived by now
            browser.close()
    finally:
        loop.run(runner.cleanup())
        loop.stop()
    assert len(opened) == 1, opened
