"""Text grounding for the language policy's pointer: where on the screenshot each instruction word
is written, as one more term of the location tokens' scores.

Why: with a patch adapter trained from scratch on tens of screens, the pointer learns where a
button is but not what it says (click-test-2: ONE or TWO, about half right after SFT on 50
demonstrations; docs/language-policy.md). No package installable here ships a vision-language
model that reads; the pixel policy got a fixed, parameter-free stand-in for reading
(trainer.policies.pixel.ground: each word rendered in the page's font and matched by normalised
cross-correlation), and this gives the language policy the same maps.

How: ``read`` turns the current screenshot and the instruction into per-word maps over the
pointer's patch grid (the best match whose centre lies in each patch). ``GroundHead`` scores
each patch as sum over words of a(word) * (w_raw * map + w_sharp * sharpened + w_row * row),
where a(word) = sigmoid(query(h) . key(embedding of the word's tokens)) lets the hidden state at
the location token choose which word to point at (the first of a sequence of buttons, then the
next), and the three weights start at zero: whether and how to use the maps is learnt. The maps
are a function of the screenshot and the instruction, both in the context, so ``act`` and the
trainer compute the same term for the same step (given the same font file, see pixel_ground).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from torch import nn

from trainer.policies.pixel.ground import best_maps, map_features, words

GAIN = 100.0  # the kind weights are learnt as GAIN * w: a few optimiser steps reach a logit's scale


def read(image: np.ndarray, instruction: str, k: int, side: int, family: str, sizes: list[int]
         ) -> tuple[np.ndarray, list[str]]:
    """float32 [k, side*side]: per instruction word (first ``k``), its best match in each patch of
    a ``side`` x ``side`` grid over the whole H x W x 3 screenshot (the patch adapter's grid);
    rows past the last word are 0. Also the words."""
    img = np.asarray(image, dtype=np.uint8)
    if img.ndim == 2:
        img = img[..., None].repeat(3, -1)
    gray = np.round(img[..., :3].astype(np.float32) @ np.array([0.299, 0.587, 0.114], dtype=np.float32))
    gray = gray.clip(0, 255).astype(np.uint8)
    best = best_maps(gray, instruction, k, family, sizes)
    out = np.zeros((k, side * side), dtype=np.float32)
    h, w = gray.shape
    if len(best) and min(h, w) >= side:  # a screen smaller than the grid has no patch to read
        rows = [round(r * h / side) for r in range(side)]
        cols = [round(c * w / side) for c in range(side)]
        pooled = np.maximum.reduceat(np.maximum.reduceat(best, rows, axis=1), cols, axis=2)
        out[:len(best)] = pooled.reshape(len(best), -1)
    return out, [instruction[a:b] for a, b in words(instruction, k)]


def word_ids(tok: Any, found: list[str], k: int) -> list[list[int]]:
    """Each word's token ids as the LM reads it inside a sentence (after a space); k lists."""
    ids = [tok.encode(" " + w) for w in found[:k]]
    return ids + [[] for _ in range(k - len(ids))]


def batch(grounds: list[Any], k: int, n: int) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Rendered.ground of each sample -> maps [B, k, n] and padded word ids [B, k, T] (-1 pads);
    None when no sample has one. A sample without (a CT sequence, another policy's) gets zeros."""
    if all(g is None for g in grounds):
        return None
    longest = max([len(ids) for g in grounds if g is not None for ids in g[1]] + [1])
    maps = torch.zeros(len(grounds), k, n)
    ids = torch.full((len(grounds), k, longest), -1, dtype=torch.long)
    for b, g in enumerate(grounds):
        if g is None:
            continue
        maps[b] = torch.from_numpy(g[0])
        for j, w in enumerate(g[1]):
            ids[b, j, :len(w)] = torch.tensor(w, dtype=torch.long)
    return maps, ids


class GroundHead(nn.Module):
    """Per patch: the query-weighed sum over words of their raw, sharpened and row-wide maps."""

    def __init__(self, hidden: int, side: int, dim: int = 64) -> None:
        super().__init__()
        self.side, self.scale = side, 1 / math.sqrt(dim)
        self.query, self.key = nn.Linear(hidden, dim), nn.Linear(hidden, dim)
        self.kinds = nn.Parameter(torch.zeros(3))

    def features(self, maps: torch.Tensor) -> torch.Tensor:
        """maps [B, k, n] -> [B, k, 3, n]: raw, sharpened, row-wide (pixel_ground.map_features)."""
        return map_features(maps, self.side)

    def word_keys(self, embed: nn.Module, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Word ids [B, k, T] -> keys [B, k, dim] from the mean of the words' (fixed) token
        embeddings, and which words exist [B, k]."""
        real = ids >= 0
        with torch.no_grad():
            emb = embed(ids.clamp(min=0)) * real.unsqueeze(-1)
            mean = emb.sum(2) / real.sum(-1, keepdim=True).clamp(min=1)
        return self.key(mean.float()), real.any(-1)

    def forward(self, h: torch.Tensor, keys: torch.Tensor, real: torch.Tensor, feats: torch.Tensor) -> torch.Tensor:
        """h [N, H] against its row's word keys [N, k, dim], words [N, k] and features
        [N, k, 3, n] -> each patch's score [N, n], zero-mean over the patches: the maps say where
        to point, not whether (the LM head decides that)."""
        a = torch.sigmoid((self.query(h).unsqueeze(1) * keys).sum(-1) * self.scale) * real
        out = torch.einsum("nk,c,nkcp->np", a, self.kinds * GAIN, feats)
        return out - out.mean(-1, keepdim=True)
