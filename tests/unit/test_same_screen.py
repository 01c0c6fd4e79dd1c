"""A replay's screen against the recorded one (producers.annotate.same_screen): anti-aliasing
noise of a level or two passes, a changed page does not."""

from __future__ import annotations

import io

import numpy as np
from PIL import Image

from producers.annotate import SCREEN_TOLERANCE, same_screen


def png(image: np.ndarray) -> bytes:
    out = io.BytesIO()
    Image.fromarray(image).save(out, format="PNG")
    return out.getvalue()


def screen() -> np.ndarray:
    image = np.full((210, 160, 3), 255, np.uint8)
    image[60:80, 10:150] = (0, 82, 255)  # a blue section header
    return image


def test_the_same_pixels_and_rendering_noise_are_the_same_screen():
    recorded = png(screen())
    assert same_screen(screen(), recorded)
    noisy = screen()
    noisy[60:80, 149] = (1, 83, 255)  # the header's anti-aliased edge, one level off
    assert same_screen(noisy, recorded)


def test_a_changed_page_or_another_size_is_another_screen():
    recorded = png(screen())
    ticked = screen()
    ticked[100:104, 20:24] = 0  # a 4 x 4 tick mark
    assert not same_screen(ticked, recorded)
    edge = screen()
    edge[70, 70, 1] = 82 + SCREEN_TOLERANCE + 1  # one channel of one pixel past the tolerance
    assert not same_screen(edge, recorded)
    assert not same_screen(screen()[:200], recorded)
