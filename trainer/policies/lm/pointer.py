"""Coordinates by pointing: the language policy picks the patch to click among the screenshot's
image tokens instead of deriving the digits of a coordinate from them.

Why: SFT of SmolLM2 with a fresh patch adapter on 50 click-test demonstrations learns one click
point for every screen (docs/language-policy.md, "The first click does not look at the screen").
Deriving "488 681" from which of 64 image tokens shows the button is a mapping the LM must learn
from scratch; choosing the image token that shows it is an attention, and the LM already
attends. GUI-Actor (2025) grounds GUI actions the same way: an attention head over the image
patches in place of coordinate text.

How, without changing what the policy writes: the tokenizer gets one location token per patch,
``<|loc_K|>`` (K = row * side + column of the current screenshot's patch grid). The location
tokens' logits are the LM head's (when to point) plus a bilinear score of the current hidden
state against each patch's last hidden state (where to point). Everything that works on
token log-probs (SFT, PPO, DPO, the behaviour log-prob of ``act``) is unchanged. The text is
UI-TARS's outside the model: ``to_uitars`` writes a location token as its patch centre in
``coord_mode`` "1000" (``<point>X Y</point>``), ``to_model`` maps a written point back to the
patch that contains it, and a patch centre maps back to its own patch, so the text the policy
reports is re-scored as exactly the tokens it sampled.
"""

from __future__ import annotations

import math
import re
from typing import Any, Sequence

import torch
from torch import nn

LOC_RE = re.compile(r"<\|loc_(\d+)\|>")
POINT_RE = re.compile(r"<point>\s*(\d+(?:\.\d+)?)[\s,]+(\d+(?:\.\d+)?)\s*</point>")
FACTOR = 1000  # coord_mode "1000": relative coordinates on a 0..1000 grid


def loc_name(k: int) -> str:
    return f"<|loc_{k}|>"


class PointerCodec:
    """UI-TARS point text <-> location tokens on a ``side`` x ``side`` patch grid."""

    def __init__(self, side: int) -> None:
        self.side, self.n = side, side * side

    def centre(self, k: int) -> tuple[int, int]:
        row, col = divmod(k, self.side)
        return round((col + 0.5) * FACTOR / self.side), round((row + 0.5) * FACTOR / self.side)

    def patch(self, x: float, y: float) -> int:
        col = min(self.side - 1, max(0, int(x * self.side / FACTOR)))
        row = min(self.side - 1, max(0, int(y * self.side / FACTOR)))
        return row * self.side + col

    def to_model(self, text: str) -> str:
        """Each ``<point>X Y</point>`` -> ``<point><|loc_K|></point>`` of the patch holding it."""
        return POINT_RE.sub(lambda m: f"<point>{loc_name(self.patch(float(m[1]), float(m[2])))}</point>", text)

    def reported(self, text: str) -> str:
        """What a policy reports for the text it sampled: every point a patch centre, so the text
        maps back to exactly the location tokens the trainer scores. Two passes: digits written
        beside a location token join its point only after the first."""
        once = self.to_uitars(self.to_model(text))
        return self.to_uitars(self.to_model(once))

    def to_uitars(self, text: str) -> str:
        """Each ``<|loc_K|>`` -> ``X Y``, its patch centre; an out-of-grid K is left as written
        (the parser then reports the action as unparsable)."""
        def centre(m: re.Match) -> str:
            k = int(m[1])
            return "{} {}".format(*self.centre(k)) if k < self.n else m[0]
        return LOC_RE.sub(centre, text)


class PointerTokenizer:
    """A tokenizer with ``n`` location tokens appended after its vocabulary."""

    def __init__(self, inner: Any, n: int) -> None:
        self.inner, self.n, self.base = inner, n, inner.vocab_size
        self.vocab_size = self.base + n

    def encode(self, text: str) -> list[int]:
        ids: list[int] = []
        for i, part in enumerate(LOC_RE.split(text)):
            if i % 2:  # a captured location index
                k = int(part)
                ids.extend([self.base + k] if k < self.n else self.inner.encode(loc_name(k)))
            elif part:
                ids.extend(self.inner.encode(part))
        return ids

    def decode(self, ids: Sequence[int]) -> str:
        out, run = [], []
        for i in ids:
            if i >= self.base:
                out.append(self.inner.decode(run) + loc_name(i - self.base))
                run = []
            else:
                run.append(i)
        return "".join(out) + self.inner.decode(run)

    def special(self, name: str) -> int:
        return self.inner.special(name)

    def piece(self, token_id: int) -> tuple[str, list[int]]:
        if token_id >= self.base:
            name = loc_name(token_id - self.base)
            return name, list(name.encode())
        return self.inner.piece(token_id)


class PointerHead(nn.Module):
    """Bilinear score of a hidden state against each patch's hidden state."""

    def __init__(self, hidden: int, dim: int = 128) -> None:
        super().__init__()
        self.query, self.key, self.scale = nn.Linear(hidden, dim), nn.Linear(hidden, dim), 1 / math.sqrt(dim)

    def keys(self, patches: torch.Tensor) -> torch.Tensor:
        """[B, n, H] -> [B, n, dim], once per sequence."""
        return self.key(patches)

    def scores(self, h: torch.Tensor, keys: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """h [N, H] against the keys of each one's row (``rows`` [N] into keys [B, n, dim]) -> [N, n]."""
        q = self.query(h) * self.scale
        out = q.new_empty(q.shape[0], keys.shape[1])
        for b in rows.unique().tolist():
            at = rows == b
            out[at] = q[at] @ keys[b].T
        return out
