"""The Annotate page in Chromium, as a person who double-clicks Start or reloads mid-episode: one
session opens, not two, and a page left closes its session (either would otherwise hold a sandbox
nobody can reach until the idle timeout). The session routes are answered by the test, so no
sandbox starts."""

from __future__ import annotations

import json

from aiohttp import web

from app.ui.server import make_app
from infra.runtime.procs import free_port
from infra.runtime.settings import load_settings
from producers.sandboxes.browser_host import find_chromium
from tests.e2e.browser_support import LoopThread, require_chromium

VIEW = {"session": "s1", "step": 0, "screenshot_sha256": "", "width": 160, "height": 210, "instruction": "click",
        "done": False, "status": "", "reason": "", "reward": 0.0, "success": False, "episode_id": ""}


def test_a_double_submitted_start_opens_one_session_and_a_page_left_closes_it():
    from playwright.sync_api import sync_playwright  # Playwright: only browser tests need it

    require_chromium()
    loop, port = LoopThread(), free_port()
    app, seen = make_app(load_settings({})), []

    @web.middleware
    async def record(request, handler):
        seen.append(request.path)  # the page's close on leaving goes to the server (the routes end with the page)
        return await handler(request)

    app.middlewares.append(record)
    runner = web.AppRunner(app)
    loop.run(runner.setup())
    loop.run(web.TCPSite(runner, "127.0.0.1", port).start())
    opened = []

    def answer(route, log, body):
        log.append(route.request.post_data)
        route.fulfill(status=200, content_type="application/json", body=json.dumps(body))

    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=find_chromium(), headless=True)
            page = browser.new_page()
            page.route("**/api/annotate/sessions", lambda route: answer(route, opened, VIEW))
            page.goto(f"http://127.0.0.1:{port}/")
            page.evaluate("""() => { const f = document.getElementById('annotate-start');
              f.elements.name.value = 'alice'; f.requestSubmit(); f.requestSubmit(); }""")
            page.wait_for_function("() => document.getElementById('annotate-status').textContent === 'step 0'")
            page.wait_for_timeout(300)  # a second request, if sent, has arrived by now
            page.reload()
            page.wait_for_timeout(300)
            browser.close()
    finally:
        loop.run(runner.cleanup())
        loop.stop()
    assert len(opened) == 1, opened
    assert "/api/annotate/sessions/s1/close" in seen, seen
