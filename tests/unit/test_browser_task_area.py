"""The fast step path's crop: a viewport screenshot cut to the task area gives exactly the pixels
of that area, and the PNG the blob store keeps decodes back to them."""

from __future__ import annotations

import io

import numpy as np
from PIL import Image

from producers.sandboxes.browser import task_area


def _png(image: np.ndarray) -> bytes:
    out = io.BytesIO()
    Image.fromarray(image).save(out, format="PNG")
    return out.getvalue()


def test_task_area_is_the_box_of_the_viewport():
    viewport = np.random.default_rng(0).integers(0, 256, size=(320, 500, 3), dtype=np.uint8)
    area = task_area(_png(viewport), (8.0, 5.0, 160.0, 210.0))
    assert area.shape == (210, 160, 3) and area.dtype == np.uint8 and area.flags.c_contiguous
    assert np.array_equal(area, viewport[5:215, 8:168])


def test_task_area_of_an_rgba_screenshot_drops_the_alpha():
    viewport = np.random.default_rng(1).integers(0, 256, size=(320, 500, 4), dtype=np.uint8)
    viewport[..., 3] = 255
    assert np.array_equal(task_area(_png(viewport), (0.0, 0.0, 160.0, 210.0)), viewport[:210, :160, :3])
