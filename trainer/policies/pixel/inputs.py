"""What the pixel policy reads besides the screenshot: the instruction's tokens (for the FiLM
embedding and for the type-text pointer) and the episode history, encoded as image planes.

History encoding (why not the last k frames or a recurrent state): after clicking ONE in
click-button-sequence the screen looks exactly as before, so more frames add nothing; what the
agent is missing is *what it did*. Earlier actions are therefore drawn into the observation:
a plane marking every cell an earlier pointer action hit, a plane marking the last one, and a
strip of counts (steps so far, actions per type, the last action's type, how often each
instruction token has been typed). Each step's input is then a pure function of its own
screenshot and the earlier actions, so ``evaluate`` scores any step of any episode on its own,
in any batch order, exactly as ``act`` saw it; and the conv trunk runs on one frame, which keeps
``act`` cheap on two cores. A recurrent state would force whole-episode replays in order.
"""

from __future__ import annotations

import re
import zlib
from typing import Any, Sequence

import numpy as np

_TOKEN = re.compile(r"\w+|[^\w\s]")


def tokenize(text: str, buckets: int) -> list[int]:
    """Stable hashed word ids (crc32, not Python's salted hash); bucket 0 means 'no words'."""
    words = re.findall(r"[a-z0-9]+", text.lower())
    return [1 + zlib.crc32(w.encode()) % (buckets - 1) for w in words] or [0]


def token_spans(instruction: str, max_tokens: int) -> list[tuple[int, int]]:
    """Character ranges of the instruction's first ``max_tokens`` tokens (words, single symbols)."""
    return [m.span() for m in _TOKEN.finditer(instruction)][:max_tokens]


def span_text(instruction: str, spans: list[tuple[int, int]], start: int, length: int) -> str | None:
    """The instruction's text from token ``start`` through token ``start + length - 1``; None
    past the last token. Copying characters (not joining tokens) keeps spaces and case."""
    end = start + length - 1
    if end >= len(spans):
        return None
    return instruction[spans[start][0]:spans[end][1]]


def span_mask(instruction: str, content: str, max_tokens: int, max_span: int) -> np.ndarray:
    """[max_tokens, max_span] bool: the (start, length) pairs whose text equals ``content``.
    An action's probability is the sum over all of them (the same text can appear twice)."""
    spans = token_spans(instruction, max_tokens)
    mask = np.zeros((max_tokens, max_span), dtype=bool)
    for i in range(len(spans)):
        for n in range(1, max_span + 1):
            text = span_text(instruction, spans, i, n)
            if text is None or len(text) > len(content):
                break
            mask[i, n - 1] = text == content
    return mask


def token_features(instruction: str, max_tokens: int, buckets: int) -> tuple[np.ndarray, np.ndarray]:
    """Per token: hashed id [max_tokens] (0 = padding) and flags [max_tokens, 3]: a quote just
    before it, a quote just after it, it is a real token. Quotes delimit what typing tasks copy."""
    spans = token_spans(instruction, max_tokens)
    ids = np.zeros(max_tokens, dtype=np.int64)
    flags = np.zeros((max_tokens, 3), dtype=np.float32)
    for k, (a, b) in enumerate(spans):
        ids[k] = 1 + zlib.crc32(instruction[a:b].lower().encode()) % (buckets - 1)
        before = instruction[:a].rstrip()[-1:]
        after = instruction[b:].lstrip()[:1]
        flags[k] = (before in ('"', "'"), after in ('"', "'"), 1.0)  # not `in "\"'"`: "" is in every string
    return ids, flags


def summary_size(n_types: int, max_tokens: int, n_keys: int = 0) -> int:
    return 1 + 2 * n_types + max_tokens + n_keys


def history_summary(history: Sequence[Any], types: list[str], instruction: str, max_tokens: int,
                    max_span: int, keys: Sequence[str] = ()) -> np.ndarray:
    """uint8 [summary_size]: steps so far, count per action type, last action's type (one-hot),
    times each instruction token was typed, then (given ``keys``) the key of the last action if
    it was a hotkey (one-hot: in the games every action is a hotkey, and without it the policy
    cannot tell which arrow it just pressed). Counts saturate at 255."""
    k = len(types)
    out = np.zeros(summary_size(k, max_tokens, len(keys)), dtype=np.int64)
    out[0] = len(history)
    for step in history:
        action = getattr(step, "action", None)
        if action is None or action.type not in types:
            continue
        t = types.index(action.type)
        out[1 + t] += 1
        if action.type == "type":
            typed = span_mask(instruction, action.content, max_tokens, max_span)
            covered = np.zeros(max_tokens, dtype=bool)
            for i, n in zip(*np.nonzero(typed)):
                covered[i:i + n + 1] = True
            out[1 + 2 * k:1 + 2 * k + max_tokens] += covered
    last = getattr(history[-1], "action", None) if history else None
    if last is not None and last.type in types:
        out[1 + k + types.index(last.type)] = 1
    if last is not None and last.type == "hotkey" and last.key in keys:
        out[1 + 2 * k + max_tokens + list(keys).index(last.key)] = 1
    return np.minimum(out, 255).astype(np.uint8)


def pointer_planes(history: Sequence[Any], cell_of, grid: int, side: int) -> np.ndarray:
    """uint8 [2, side, side]: 255 over the cell of every earlier pointer action; the last one's."""
    planes = np.zeros((2, side, side), dtype=np.uint8)
    cell_px = side // grid
    pointer = [s.action for s in history if getattr(s, "action", None) is not None and hasattr(s.action, "x")]
    for n, action in enumerate(pointer):
        row, col = divmod(cell_of(action), grid)
        box = (slice(row * cell_px, (row + 1) * cell_px), slice(col * cell_px, (col + 1) * cell_px))
        planes[0][box] = 255
        if n == len(pointer) - 1 and getattr(history[-1], "action", None) is action:
            planes[1][box] = 255
    return planes
