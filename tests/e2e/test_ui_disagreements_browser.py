"""The Disagreements view in Chromium: a person opens it for a run a verifier decided, sees the
false positives per task, and clicks one through to its step-by-step replay; a run no verifier
decided says so. Real chDB in the test's folder (the UI reads the directory, as for a finished run)."""

from __future__ import annotations

from aiohttp import web

from app.ui.server import make_app
from infra.runtime.procs import free_port
from infra.runtime.settings import load_settings
from producers.sandboxes.browser_host import find_chromium
from tests.e2e.browser_support import LoopThread, require_chromium
from tests.integration.disagreement_rows import FALSE_NEGATIVES, FALSE_POSITIVES, JUDGED_RUN, PAGE_RUN, write_log

TOKEN = "t" * 24
EPISODES_SHOWN = "[...document.querySelectorAll('#disagree-episodes a.replay-link')].map(a => a.textContent).sort()"


def test_open_the_view_and_click_a_false_positive_through_to_its_replay(tmp_path):
    from playwright.sync_api import sync_playwright  # Playwright: only browser tests need it

    require_chromium()
    settings = load_settings({"data_dir": str(tmp_path)})
    write_log(settings)
    loop, port = LoopThread(), free_port()
    runner = web.AppRunner(make_app(settings, TOKEN))
    loop.run(runner.setup())
    loop.run(web.TCPSite(runner, "127.0.0.1", port).start())
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=find_chromium(), headless=True)
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(f"http://127.0.0.1:{port}/?token={TOKEN}&run={JUDGED_RUN}")
            page.wait_for_function(f"document.getElementById('run').value === '{JUDGED_RUN}'", timeout=30_000)
            page.click("#nav-disagreements")
            page.wait_for_function(f"{EPISODES_SHOWN}.length === {len(FALSE_POSITIVES | FALSE_NEGATIVES)}",
                                   timeout=30_000)
            assert page.evaluate(EPISODES_SHOWN) == sorted(FALSE_POSITIVES | FALSE_NEGATIVES)
            assert "click-a" in page.inner_text("#disagree-tasks") and "ALL" in page.inner_text("#disagree-tasks")
            page.select_option("#disagree-filter select[name=kind]", "false_positive")
            page.click("#disagree-filter button")
            page.wait_for_function(f"{EPISODES_SHOWN}.length === {len(FALSE_POSITIVES)}", timeout=30_000)
            assert page.evaluate(EPISODES_SHOWN) == sorted(FALSE_POSITIVES)
            href = page.get_attribute("#disagree-episodes a.replay-link >> nth=0", "href")
            assert f"token={TOKEN}" in href and "episode=" in href  # a new tab opens the replay too

            page.click("#disagree-episodes a.replay-link >> text=a-fp")
            page.wait_for_function("document.getElementById('step-label').innerText.includes('a-fp')", timeout=30_000)
            assert not page.is_hidden("#view-episodes") and page.is_hidden("#view-disagreements")
            assert "(1/2)" in page.inner_text("#step-label")
            page.click("#next")
            assert "(2/2)" in page.inner_text("#step-label")

            page.select_option("#run", PAGE_RUN)
            page.click("#nav-disagreements")
            page.wait_for_function("document.getElementById('disagree-empty').innerText.includes('No episode')",
                                   timeout=30_000)
            assert page.evaluate(EPISODES_SHOWN) == []
            browser.close()
    finally:
        loop.run(runner.cleanup())
        loop.stop()
