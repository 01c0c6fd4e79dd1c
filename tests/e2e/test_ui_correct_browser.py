"""The corrector (app.ui.correct) against a real platform: a failed click-tab-2 episode (its first
click on nothing, then Finish) recorded through the Annotate view and carried on as the pipeline
would; the corrector replays it in its own browser sandbox (the recorded screens checked), finds
the first wrong step through the task's routine (no scripted solver runs), and saves the correction
through the Episodes view: one error-correction pair on flywheel.pairs.v1 under human:<name>, at
that step, clicking where the person's element is. An episode id the log does not hold is reported,
not corrected."""

from __future__ import annotations

import pytest

from app.ui.correct import correct
from app.ui.record import SCALE, Served, _send, start
from app.ui.record_routines import routine_for
from producers import reflection, scripted
from tests.e2e.browser_support import require_chromium
from tests.e2e.pipeline_support import as_the_pipeline_would, steps_events
from trainer.dpo.train import read_pairs, select_pairs

TASK, SEED, NAME = "click-tab-2", 11, "fixer"


def failed_episode(settings) -> tuple[str, tuple[float, float]]:
    """A click-tab-2 episode whose first click lands on nothing, then Finish; -> its id and where
    the routine would have clicked first (the screen's pixels)."""
    from playwright.sync_api import sync_playwright

    from producers.sandboxes.browser_host import find_chromium

    served = Served(settings)
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=find_chromium(), headless=True)
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(served.base + "/#annotate")
            page.wait_for_selector(f"#annotate-task option[value={TASK}]", state="attached", timeout=30_000)
            start(page, TASK, SEED, "agent")
            want = routine_for(TASK)(page.inner_text("#annotate-instruction"), served.seen(page.evaluate("ann.session")))
            assert want is not None and want.y < 195  # the bottom strip under the tabs holds nothing
            _send(page, lambda: page.click("#annotate-shot", position={"x": 80 * SCALE, "y": 205 * SCALE}))
            _send(page, lambda: page.click("#annotate-finish"))
            browser.close()
    finally:
        served.close()
    return as_the_pipeline_would(settings, steps_events(settings)), (want.x, want.y)


def test_a_failed_episode_is_corrected_at_its_first_wrong_step_through_the_ui(settings, monkeypatch):
    require_chromium()
    episode_id, (x, y) = failed_episode(settings)

    def no_solver(*_args, **_kwargs):
        raise AssertionError("a scripted solver was called while correcting")

    # every way the reflection walk reaches a solver: the module's function and the defaults bound to it
    monkeypatch.setattr(scripted, "solve", no_solver)
    monkeypatch.setitem(reflection.annotate.__kwdefaults__, "solve", no_solver)
    monkeypatch.setattr(reflection.solver_choice, "__defaults__", (no_solver,))
    lines: list[str] = []
    done = correct(settings, [episode_id, "no-such-episode"], NAME, say=lines.append)
    assert [c.outcome for c in done] == ["corrected", "not_found"], lines
    assert done[0].tau == 0 and done[0].pair and done[0].task == TASK
    assert done[0].point == pytest.approx((x, y), abs=1.0)

    pairs = select_pairs(read_pairs(settings, 30), ["error_correction"], [f"human:{NAME}"])
    assert len(pairs) == 1 and pairs[0].episode_id == episode_id and pairs[0].tau == 0
    assert pairs[0].event_id == done[0].pair
    chosen, rejected = pairs[0].chosen.action, pairs[0].rejected.action
    assert chosen.type == "click" and abs(chosen.x * 160 - x) < 1 and abs(chosen.y * 210 - y) < 1  # the view's own scale
    assert rejected.type == "click" and rejected.y * 210 > 200  # the agent's click on nothing
