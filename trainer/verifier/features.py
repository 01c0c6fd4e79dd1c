"""An Example as the verifier's tensors: three screens, where the pointer went, the words, the action counts.

    image   [11, S, S] uint8: the first screen (RGB); the screen the last action was taken on (RGB:
            MiniWoB++ covers the page once it ends, a success and a failure alike, so the verdict
            is read from the screen before the last action and where that action went); the screen
            after the last step when recorded, else the last step's (RGB: was the episode ended by
            the page or cut by the step budget); a plane marking every point a pointer action hit;
            and one marking the last action's points
    words   the instruction's hashed word ids (trainer.policies.pixel.inputs.tokenize, as the
            pixel policy embeds its instruction)
    typed   the typed text's and pressed keys' word ids (did it type what it was asked to?)
    counts  [len(ACTION_TYPES) + 2] float32: the fraction of steps per action type, the fraction
            that did not parse, log(1 + steps)
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from PIL import Image

from schemas.actions import ACTION_TYPES
from trainer.policies.pixel.inputs import tokenize
from trainer.verifier.dataset import Example

N_COUNTS = len(ACTION_TYPES) + 2
IMAGE_CHANNELS = 11


@dataclass(frozen=True)
class Features:
    image: np.ndarray  # [IMAGE_CHANNELS, S, S] uint8
    words: list[int]
    typed: list[int]
    counts: np.ndarray  # [N_COUNTS] float32


@dataclass(frozen=True)
class Batch:
    """Features stacked for the model: ``images`` [N, IMAGE_CHANNELS, S, S] uint8, ``counts`` [N, N_COUNTS],
    the word ids flat with their offsets (torch's EmbeddingBag layout)."""
    images: torch.Tensor
    words: tuple[torch.Tensor, torch.Tensor]
    typed: tuple[torch.Tensor, torch.Tensor]
    counts: torch.Tensor

    def __len__(self) -> int:
        return len(self.images)

    def take(self, idx: Sequence[int]) -> "Batch":
        return Batch(self.images[list(idx)], _take_bags(self.words, idx, len(self)),
                     _take_bags(self.typed, idx, len(self)), self.counts[list(idx)])


def screen(png: bytes, side: int) -> np.ndarray:
    """A PNG -> [3, side, side] uint8."""
    img = Image.open(io.BytesIO(png)).convert("RGB").resize((side, side), Image.BILINEAR)
    return np.asarray(img, dtype=np.uint8).transpose(2, 0, 1)


def pointer_plane(actions: Sequence[dict | None], side: int) -> np.ndarray:
    """[1, side, side] uint8: 255 around every point a pointer action (or a drag's ends) hit."""
    plane = np.zeros((1, side, side), dtype=np.uint8)
    for a in actions:
        if not a:
            continue
        for xk, yk in (("x", "y"), ("x1", "y1"), ("x2", "y2")):
            x, y = a.get(xk), a.get(yk)
            if isinstance(x, (int, float)) and isinstance(y, (int, float)):
                cx, cy = _cell(x, side), _cell(y, side)
                plane[0, max(cy - 1, 0):cy + 2, max(cx - 1, 0):cx + 2] = 255
    return plane


def _cell(v: float, side: int) -> int:
    scaled = v * side
    if isinstance(scaled, float) and not math.isfinite(scaled):  # JSON's NaN/Infinity, or 1e308 * side
        raise ValueError(f"a pointer coordinate must be finite, got {v}")
    return min(max(int(scaled), 0), side - 1)


def action_counts(actions: Sequence[dict | None]) -> np.ndarray:
    counts = np.zeros(N_COUNTS, dtype=np.float32)
    n = max(len(actions), 1)
    for a in actions:
        if a is None:
            counts[len(ACTION_TYPES)] += 1.0 / n
        elif a.get("type") in ACTION_TYPES:
            counts[ACTION_TYPES.index(a["type"])] += 1.0 / n
    counts[-1] = math.log1p(len(actions))
    return counts


def typed_text(actions: Sequence[dict | None]) -> str:
    parts = [str(a.get("content") or a.get("key") or a.get("keys") or "") for a in actions
             if a and a.get("type") in ("type", "hotkey")]
    return " ".join(parts)


def featurize(example: Example, load: Callable[[str], bytes], side: int, buckets: int) -> Features:
    """``load``: a screenshot's bytes by sha256 (the blob store's ``get``)."""
    first = screen(load(example.screenshots[0]), side)
    last_step = screen(load(example.screenshots[-1]), side)
    final = screen(load(example.final_screenshot), side) if example.final_screenshot else last_step
    image = np.concatenate([first, last_step, final, pointer_plane(example.actions, side),
                            pointer_plane(example.actions[-1:], side)])
    return Features(image, tokenize(example.instruction, buckets), tokenize(typed_text(example.actions), buckets),
                    action_counts(example.actions))


def stack(features: Sequence[Features]) -> Batch:
    return Batch(torch.from_numpy(np.stack([f.image for f in features])),
                 _bags([f.words for f in features]), _bags([f.typed for f in features]),
                 torch.from_numpy(np.stack([f.counts for f in features])))


def _bags(ids: Sequence[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    offsets = torch.tensor([0] + [len(i) for i in ids[:-1]], dtype=torch.long).cumsum(0)
    return torch.tensor([t for i in ids for t in i], dtype=torch.long), offsets


def _take_bags(bags: tuple[torch.Tensor, torch.Tensor], idx: Sequence[int], n: int) -> tuple[torch.Tensor, torch.Tensor]:
    flat, offsets = bags
    ends = torch.cat([offsets[1:], torch.tensor([len(flat)])])
    return _bags([flat[offsets[i]:ends[i]].tolist() for i in idx])
