"""The fast step path shows the pixels the page shows: its observation (a viewport screenshot on
the page's CDP session, cropped here) equals, pixel for pixel, Playwright's clipped screenshot of
the task area (the path it replaced) on the same page state, and the PNG the blob store keeps
decodes to the same pixels (what the UI replays)."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from tests.e2e.browser_support import browser_sandbox

from schemas.actions import Click, Hotkey
from schemas.events import TaskSpec

pytestmark = pytest.mark.e2e

# a default-suite task, tasks in no suite (a canvas, an animated menu, a grid) and a game
PAGES = [("miniwob", "click-collapsible"), ("miniwob", "click-pie"), ("miniwob", "count-shape"),
         ("miniwob", "grid-coordinate"), ("games", "games.2048")]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    yield from browser_sandbox(tmp_path_factory)


def _old_path_pixels(loop, sandbox) -> np.ndarray:
    x, y, w, h = sandbox._box
    png = loop.run(sandbox._page.screenshot(clip={"x": x, "y": y, "width": w, "height": h}, type="png",
                                            caret="initial"))
    return np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))


@pytest.mark.parametrize("suite,name", PAGES)
def test_the_observation_is_the_pixels_a_clipped_screenshot_shows(env, suite, name):
    loop, sandbox = env
    obs = loop.run(sandbox.reset(TaskSpec(task_id=f"fast.{name}", suite=suite, name=name, seed=11)))
    assert np.array_equal(obs.image, _old_path_pixels(loop, sandbox))
    action = Hotkey(key="ArrowLeft") if suite == "games" else Click(x=0.5, y=0.6)
    result = loop.run(sandbox.step(action))
    assert np.array_equal(result.obs.image, _old_path_pixels(loop, sandbox))
    loop.run(sandbox.flush())
    stored = sandbox.blobs.get(result.obs.observation.screenshot.sha256)
    assert np.array_equal(np.asarray(Image.open(io.BytesIO(stored)).convert("RGB")), result.obs.image)
    assert result.obs.observation.screenshot.media_type == "image/png"
