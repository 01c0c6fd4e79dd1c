"""Random 160x210 screens as the pixel policy's inputs, for tests that act on them."""

from __future__ import annotations

from typing import Callable

import numpy as np

from infra.runtime.policy import PolicyInput


def random_inputs(n: int, instruction: str, history: Callable[[int], list] = lambda k: [], seed: int = 0) -> list[PolicyInput]:
    """``n`` inputs of random pixels with ``instruction``; ``history(k)``: the k-th input's past steps."""
    rng = np.random.default_rng(seed)
    return [PolicyInput(image=rng.integers(0, 255, (210, 160, 3), dtype=np.uint8), instruction=instruction,
                        screen_width=160, screen_height=210, history=list(history(k))) for k in range(n)]
