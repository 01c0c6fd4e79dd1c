"""Grounding augmentation: a screenshot and its pointer action translated together.

A demonstration shows the policy one place to click per screen. A policy whose vision adapter
starts from scratch (the language policy's patch adapter) then learns where *those* targets
were, not how to find one. Translating the screen and the click by the same offset is a
label-preserving copy (the element moved, the click moved with it), so a handful of
demonstrations cover many positions. The uncovered border takes the screen's own background
(its corner colour). Pure functions over numpy arrays and action models.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np

POINTER_FIELDS = ("x", "y")


def has_point(action: Any) -> bool:
    return all(hasattr(action, f) for f in POINTER_FIELDS)


def translate(image: np.ndarray, dx: int, dy: int) -> np.ndarray:
    """``image`` (H x W x C) moved right by ``dx`` and down by ``dy`` pixels; the uncovered
    border is filled with the top-left pixel's colour."""
    h, w = image.shape[:2]
    out = np.empty_like(image)
    out[...] = image[0, 0]
    src_y, dst_y = slice(max(0, -dy), min(h, h - dy)), slice(max(0, dy), min(h, h + dy))
    src_x, dst_x = slice(max(0, -dx), min(w, w - dx)), slice(max(0, dx), min(w, w + dx))
    out[dst_y, dst_x] = image[src_y, src_x]
    return out


def shifted(image: np.ndarray, action: Any, dx: int, dy: int) -> tuple[np.ndarray, Any] | None:
    """The screen and its pointer action moved by (dx, dy) pixels; None when the point would
    leave the screen (or the action has no point)."""
    if not has_point(action):
        return None
    h, w = image.shape[:2]
    x, y = action.x + dx / w, action.y + dy / h
    if not (0.0 <= x <= 1.0 and 0.0 <= y <= 1.0):
        return None
    return translate(image, dx, dy), action.model_copy(update={"x": x, "y": y})


def random_shifts(image: np.ndarray, action: Any, copies: int, max_frac: float, rng: random.Random
                  ) -> list[tuple[np.ndarray, Any]]:
    """Up to ``copies`` translated copies, offsets uniform within ``max_frac`` of each side and
    keeping the point on screen."""
    if not has_point(action) or copies <= 0:
        return []
    h, w = image.shape[:2]
    out = []
    for _ in range(copies):
        dx = rng.randint(-int(max_frac * w), int(max_frac * w))
        dy = rng.randint(-int(max_frac * h), int(max_frac * h))
        dx = min(max(dx, -int(action.x * w)), int((1 - action.x) * w))  # keep the point on the screen
        dy = min(max(dy, -int(action.y * h)), int((1 - action.y) * h))
        copy = shifted(image, action, dx, dy)
        if copy is not None:
            out.append(copy)
    return out
