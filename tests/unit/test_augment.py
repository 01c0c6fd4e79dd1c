"""Grounding augmentation (trainer.core.augment): the screen and its click move together."""

import random

import numpy as np

from schemas.actions import Click, Type
from trainer.core.augment import random_shifts, shifted, translate


def screen() -> np.ndarray:
    img = np.full((10, 20, 3), 255, np.uint8)
    img[2:4, 5:8] = (0, 0, 200)  # a "button" at rows 2-3, columns 5-7
    return img


def test_translate_moves_content_and_fills_with_the_background():
    out = translate(screen(), dx=3, dy=4)
    assert (out[6:8, 8:11] == (0, 0, 200)).all()
    assert (out[2:4, 5:8] == 255).all()  # where it was is background now
    assert out.shape == (10, 20, 3)
    back = translate(out, dx=-3, dy=-4)
    assert (back == screen()).all()


def test_the_click_follows_the_element():
    img = screen()
    click = Click(x=6.5 / 20, y=3 / 10)
    moved_img, moved = shifted(img, click, dx=4, dy=-2)
    px, py = int(moved.x * 20), int(moved.y * 10)
    assert (moved_img[py, px] == (0, 0, 200)).all()
    assert abs(moved.x - 10.5 / 20) < 1e-9 and abs(moved.y - 1 / 10) < 1e-9


def test_no_copy_when_the_point_leaves_the_screen_or_there_is_none():
    assert shifted(screen(), Click(x=0.9, y=0.5), dx=5, dy=0) is None
    assert shifted(screen(), Type(content="hi"), dx=1, dy=1) is None
    assert random_shifts(screen(), Type(content="hi"), 4, 0.3, random.Random(0)) == []


def test_random_shifts_keep_every_click_on_its_element():
    img, click = screen(), Click(x=6.5 / 20, y=3 / 10)
    copies = random_shifts(img, click, 20, 0.5, random.Random(0))
    assert len(copies) == 20
    offsets = set()
    for moved_img, moved in copies:
        assert 0 <= moved.x <= 1 and 0 <= moved.y <= 1
        assert (moved_img[min(int(moved.y * 10), 9), min(int(moved.x * 20), 19)] == (0, 0, 200)).all()
        offsets.add((round(moved.x, 3), round(moved.y, 3)))
    assert len(offsets) > 5  # copies at many positions, not one

