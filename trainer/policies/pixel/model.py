"""The pixel policy: a small CNN over the screenshot and the episode's history, a hashed-token
embedding of the instruction, a factorised action head and a value head. Small enough that
``act`` runs inside a rollout worker on two CPU cores.

Input (``preprocess``): the screenshot cropped to ``crop`` (by default MiniWoB's 160 x 160 area
below the instruction bar, pixel for pixel: 40 px buttons keep legible labels) plus three history
planes (trainer.policies.pixel.inputs says why the history is drawn in rather than remembered):
every earlier pointer action's cell, the last one's, and a strip of counts; with ``ground``, one
more plane holds where each instruction word is written on the screenshot
(trainer.policies.pixel.ground). Three stride-2 convolutions give one feature per grid cell; a
fourth, at grid resolution, also sees the grounding maps weighed per word (which words to look
for is learnt from the word, its neighbours and the history) and, with ``coords``, each cell's
row and column (which "2nd textbox" is needs where, not only what). The instruction and the
counts modulate the features (FiLM), so one policy serves several tasks and knows what it
already did. The type, key and scroll-direction heads and the typed span's query (not the cell
maps) read each channel's mean and maximum over the grid and, with ``keypoints``, where it peaks:
the expected row and column under a softmax over the cells (spatial softmax, Levine et al.,
2016): where a snake's head is against the apple and the walls, which a mean or a maximum loses;
with ``head_hidden``, through a ReLU layer of that width rather than linearly. The critic reads
them through its own layer.

Action heads, each factor a categorical, the action's log-prob the sum of its factors':
- ``type``: which action type (a subset of the unified action space, ``action_types``);
- pointer types (click, left_double, right_single, long_press, scroll): a cell of a G x G grid,
  one ``loc_kernel`` convolution map per pointer type (translation-equivariant: "the ONE button
  looks like this" transfers across positions); scroll adds a direction;
- ``type`` text: a pointer over instruction token spans (start token, then length), as in
  WGE / MiniWoB work: MiniWoB's typing tasks copy their text from the instruction;
- ``hotkey``: one of ``keys``; no-argument types (press_enter, finished, wait, ...) add nothing.

Invariant: ``evaluate`` reproduces the log-prob ``act`` returned, for every action type and any
history (up to float error, same weights). A pointer action sits at its cell's centre and maps
back to that cell; a typed text's probability is the sum over every span with that text.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from torch import nn

from infra.runtime.policy import Decision, PolicyInput, past_steps, screen
from schemas import actions as A
from schemas.blobs import BlobNotFound, BlobStore
from trainer.policies.base import PolicyDefaults
from trainer.policies.pixel.ground import PAGE_FONT, PAGE_SIZES, map_features, pin_font, stored_match_maps, word_features
from trainer.policies.pixel.inputs import (
    history_summary, pointer_planes, span_mask, span_text, summary_size, token_features, token_spans, tokenize,
)

POINTER_TYPES = {"click": A.Click, "left_double": A.LeftDouble, "right_single": A.RightSingle,
                 "long_press": A.LongPress, "scroll": A.Scroll}
NOARG_TYPES = {"wait": A.Wait, "finished": A.Finished, "call_user": A.CallUser, "press_back": A.PressBack,
               "press_home": A.PressHome, "press_enter": A.PressEnter}
ARG_TYPES = ("type", "hotkey")
# finite "impossible": -inf would turn the masked-out branch's gradient into NaN
NEG = -1e9
HISTORY_PLANES = 3  # earlier pointer cells, the last pointer cell, the counts (first bytes of the plane)

def mix_floor(logits: torch.Tensor, explore: torch.Tensor, floor: torch.Tensor | None = None) -> torch.Tensor:
    """Log-probs of the mixture (1 - e) softmax(logits) + e floor over the last dim, e = ``explore``
    [N] per row of ``logits`` [N, ...]: an exploration floor that no sharpening of the policy can take
    away (e = 0: the policy's own log-probs; e < 1). ``floor`` (rows summing to 1, ``guide_floor``;
    [N, cells] for every head, or shaped as ``logits``) is where the floor's share goes; None:
    uniformly."""
    e = explore.to(logits.dtype).reshape((-1,) + (1,) * (logits.dim() - 1))
    own = torch.log1p(-e) + F.log_softmax(logits, -1)
    if floor is None:
        return torch.logaddexp(own, torch.log(e / logits.shape[-1]).expand_as(own))
    if floor.dim() != logits.dim():
        floor = floor.reshape((floor.shape[0],) + (1,) * (logits.dim() - 2) + (floor.shape[-1],))
    return torch.logaddexp(own, (torch.log(e) + torch.log(floor.to(logits.dtype))).expand_as(own))


GUIDE_UNIFORM = 0.2  # the guided floor's uniform share: every cell stays reachable (the floor never excludes)
GUIDE_NEIGHBOUR = 0.5  # a demonstrated cell's neighbours each get this much of its own weight: "near" it


def guide_floor(points: Sequence[tuple[int, float, float]], step: int, cell_at: Any, grid: int,
                uniform: float = GUIDE_UNIFORM) -> np.ndarray:
    """The guided exploration floor of one click at this ``step`` [grid * grid], summing to 1: the
    cells where demonstrations clicked at the same step and their neighbours (each point's patch
    weighs the same, at the page's edge too), mixed with ``uniform`` of uniform; uniform alone
    where no demonstration clicked at that step (it typed, or had ended). ``cell_at(x, y)``: the
    cell of a point (the screen's fractions). Workflow-guided exploration (arXiv 1802.08802) in its
    simplest form: the demonstrations say where to look, reward says what works."""
    n = grid * grid
    here = [p for p in points if p[0] == step]
    if not here:
        return np.full(n, 1.0 / n)
    heat = np.zeros((grid, grid))
    for _, x, y in here:
        row, col = divmod(cell_at(x, y), grid)
        patch = np.zeros((grid, grid))
        patch[max(row - 1, 0):row + 2, max(col - 1, 0):col + 2] = GUIDE_NEIGHBOUR
        patch[row, col] = 1.0
        heat += patch / patch.sum()
    return (1.0 - uniform) * heat.ravel() / len(here) + uniform / n


# the heads the multi-step MiniWoB suites need (producers.suites names them per suite)
MULTI_STEP_ACTIONS = ["click", "type", "press_enter", "scroll", "finished"]

DEFAULT_CONFIG: dict[str, Any] = {
    "action_types": ["click"],   # subset of the unified action space this head can emit
    "grid": 20,                  # click location: categorical over grid x grid cells (8 px on MiniWoB)
    "channels": [8, 16, 32],     # conv widths (narrow early layers: half the update and act time, same learning)
    "grayscale": True,           # full-resolution grey beats downscaled colour: button texts stay legible
    "embed_buckets": 4096,       # hashed instruction tokens
    "embed_dim": 32,
    # MiniWoB's 160 x 210 task area less its 50 px instruction bar (the instruction arrives as
    # text): a 160 x 160 crop seen at 8 * 20 = 160 px, pixel for pixel, no resize
    "crop": [0.0, 50 / 210, 1.0, 1.0],
    "loc_kernel": 1,             # the location head's conv kernel (odd): context each cell's logit sees
    "max_tokens": 48,            # instruction tokens the text pointer can copy from
    "max_span": 8,               # longest copied span, in tokens
    "keys": ["tab", "backspace", "escape", "space"],  # what a hotkey action can press
    "scroll_directions": ["up", "down"],
    "last_key": False,           # the history strip also says which key the last hotkey pressed
    "ground": False,             # per-word text matching maps (trainer.policies.pixel.ground)
    "ground_words": 16,          # instruction words matched
    "ground_font": PAGE_FONT,    # the page's CSS font family, resolved by fontconfig (or a font file)
    "ground_sizes": list(PAGE_SIZES),  # px of the page's text
    "ground_dim": 4,             # channels the weighed maps give the grid-level convolution
    "coords": False,             # each cell's row and column as two more channels there
    "keypoints": False,          # each channel's spatial-softmax position (x, y) beside its mean and max
    "head_hidden": 0,            # > 0: type, key, direction and span query read a ReLU layer this wide over the pooled features
    "seed": 0,                   # initial weights
}


class PixelPolicy(nn.Module, PolicyDefaults):
    kind = "pixel"

    def __init__(self, name: str = "pixel", config: dict[str, Any] | None = None, version: int = 0) -> None:
        super().__init__()
        cfg = pin_font({**DEFAULT_CONFIG, **(config or {})})
        known = set(POINTER_TYPES) | set(NOARG_TYPES) | set(ARG_TYPES)
        unknown = [t for t in cfg["action_types"] if t not in known]
        if unknown or not cfg["action_types"]:
            raise ValueError(f"pixel policy cannot emit action types {unknown or '[]'}; choose from {sorted(known)}")
        self.cfg, self.name, self.version = cfg, name, version
        self._maps_store: BlobStore | None = None  # use_blob_store's: where each screenshot's grounding maps are kept
        self._guides: dict[tuple, np.ndarray] = {}  # _guide_floor's: a task's guide is the same at every step of it
        self.grid, self.side = int(cfg["grid"]), 8 * int(cfg["grid"])
        self.types: list[str] = list(cfg["action_types"])
        self.pointers = [t for t in self.types if t in POINTER_TYPES]
        self.max_tokens, self.max_span = int(cfg["max_tokens"]), int(cfg["max_span"])
        # the keys the strip tells apart (inputs.history_summary): none unless ``last_key``
        self.summary_keys = list(cfg["keys"]) if cfg["last_key"] and "hotkey" in self.types else []
        self.n_summary = summary_size(len(self.types), self.max_tokens, len(self.summary_keys))
        if self.n_summary > self.side ** 2:
            raise ValueError(f"history summary ({self.n_summary}) does not fit a {self.side} px plane: fewer max_tokens")
        self.ground, self.n_words = bool(cfg["ground"]), int(cfg["ground_words"])
        if self.ground and self.n_words * self.grid ** 2 > self.side ** 2:
            raise ValueError(f"{self.n_words} grounding maps do not fit a {self.side} px plane: fewer ground_words")
        c_img = 1 if cfg["grayscale"] else 3
        self.n_image = c_img + 2  # the screenshot and the two pointer planes: the convolutions' input
        c1, c2, c3 = cfg["channels"]
        e = int(cfg["embed_dim"])
        g = int(cfg["ground_dim"]) if self.ground else 0
        grid_in = c3 + g + (2 if cfg["coords"] else 0)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(cfg["seed"]))
            self.convs = nn.ModuleList([
                nn.Conv2d(c_img + 2, c1, 5, stride=2, padding=2),
                nn.Conv2d(c1, c2, 3, stride=2, padding=1),
                nn.Conv2d(c2, c3, 3, stride=2, padding=1),
                nn.Conv2d(grid_in, c3, 3, stride=1, padding=1),
            ])
            self.embed = nn.EmbeddingBag(int(cfg["embed_buckets"]), e, mode="mean")
            self.history = nn.Linear(self.n_summary, e)
            self.film = nn.Linear(2 * e, 2 * c3)
            k = int(cfg["loc_kernel"])
            self.loc_head = nn.Conv2d(c3, max(len(self.pointers), 1), k, padding=k // 2)
            pooled = (4 if cfg["keypoints"] else 2) * c3 + 2 * e
            hidden = int(cfg["head_hidden"])
            trunk = hidden or pooled
            self.type_head = nn.Linear(trunk, len(self.types))
            self.value_head = nn.Sequential(nn.Linear(pooled, 64), nn.ReLU(), nn.Linear(64, 1))
            heads: list[nn.Module] = [self.loc_head, self.type_head]
            if "scroll" in self.types:
                self.direction_head = nn.Linear(trunk, len(cfg["scroll_directions"]))
                heads.append(self.direction_head)
            if "hotkey" in self.types:
                self.key_head = nn.Linear(trunk, len(cfg["keys"]))
                heads.append(self.key_head)
            if "type" in self.types:  # span pointer: token features scored against the trunk
                self.tok_embed = nn.Embedding(int(cfg["embed_buckets"]), e)
                self.tok_pos = nn.Embedding(self.max_tokens, e)
                self.tok_proj = nn.Linear(3 + 1, e)  # quote before, quote after, real token; times typed
                self.span_query = nn.Linear(trunk, e)
                self.start_out = nn.Linear(e, 1)
                self.len_embed = nn.Embedding(self.max_span, e)
                self.end_out = nn.Linear(e, 1)
                heads += [self.start_out, self.end_out]
            if self.ground:  # per word and map kind (raw, sharpened, its row): its weight in each channel
                buckets = int(cfg["embed_buckets"])
                self.word_embed = nn.ModuleList([nn.Embedding(buckets, e) for _ in range(3)])  # word, before, after
                self.word_pos = nn.Embedding(self.n_words, e)
                self.word_flags = nn.Linear(3, e)
                self.word_query = nn.Linear(2 * e, e)
                self.word_out = nn.Linear(e, 3 * g)
                heads.append(self.word_out)
            # drawn after the rest: without it (0) no weight is drawn otherwise than before it existed
            self.trunk = nn.Sequential(nn.Linear(pooled, hidden), nn.ReLU()) if hidden else nn.Identity()
            # start uniform over cells, types and arguments: exploration comes from the policy
            for head in heads:
                nn.init.zeros_(head.weight)
                nn.init.zeros_(head.bias)
            nn.init.zeros_(self.film.weight)
            nn.init.zeros_(self.film.bias)

    def config_dict(self) -> dict[str, Any]:
        return dict(self.cfg)

    # ------------------------------------------------------------ inputs

    def use_blob_store(self, store: BlobStore) -> None:
        """Where the text-grounding maps of each screenshot are kept (``stored_match_maps``): the
        rollout's policy stores them as it acts, the trainer's reads them back."""
        self._maps_store = store

    def preprocess(self, image: np.ndarray, history: Sequence[Any] = (), instruction: str = "",
                   store: BlobStore | None = None) -> torch.Tensor:
        """H x W x 3 uint8 screenshot + earlier steps (+ the instruction, for ``ground``) ->
        [C + 3 (+ 1), 8G, 8G] uint8: the cropped screenshot, the pointer planes, the grounding
        plane, the counts. Without ``instruction`` the history's is used. Recorded steps are read
        as a policy sees them (``past_steps``), so the trainer rebuilds exactly what ``act`` saw.
        The grounding maps come from ``store`` (default: ``use_blob_store``'s) when they are there."""
        history = past_steps(history)
        h, w = image.shape[:2]
        x0, y0, x1, y1 = self.cfg["crop"]
        img = Image.fromarray(np.ascontiguousarray(image[..., :3]))
        box = (round(x0 * w), round(y0 * h), round(x1 * w), round(y1 * h))
        img = img.crop(box)
        img = img.convert("L" if self.cfg["grayscale"] else "RGB").resize((self.side, self.side), Image.BILINEAR)
        arr = np.asarray(img, dtype=np.uint8)
        arr = arr[None] if arr.ndim == 2 else arr.transpose(2, 0, 1)
        instruction = instruction or (history[-1].observation.instruction if history else "")
        strip = np.zeros((1, self.side * self.side), dtype=np.uint8)
        strip[0, :self.n_summary] = history_summary(history, self.types, instruction, self.max_tokens, self.max_span,
                                                   self.summary_keys)
        parts = [arr, pointer_planes(history, self._cell_of, self.grid, self.side)]
        if self.ground:
            maps = np.zeros((1, self.side * self.side), dtype=np.uint8)
            gray = arr[0] if arr.shape[0] == 1 else np.asarray(img.convert("L"), dtype=np.uint8)
            found = stored_match_maps(store if store is not None else self._maps_store, gray,
                                      instruction, self.n_words, self.grid, self.cfg["ground_font"],
                                      self.cfg["ground_sizes"], scale=self.side / max(box[3] - box[1], 1))
            maps[0, :found.size] = found.ravel()
            parts.append(maps.reshape(1, self.side, self.side))
        return torch.from_numpy(np.concatenate(parts + [strip.reshape(1, self.side, self.side)]))

    def step_inputs(self, traj: Any, store: BlobStore) -> list[torch.Tensor]:
        """Each step of ``traj`` as ``act`` saw it (screenshot from ``store`` + earlier steps).
        ValueError for a step whose action ``evaluate`` cannot score (e.g. a text not in the
        instruction)."""
        out = []
        for i, step in enumerate(traj.steps):
            if not self.can_represent(step.action, step.observation.instruction):
                raise ValueError(f"step {step.step_index}: pixel policy cannot score action {step.action!r}")
            image = screen(store, step.observation.screenshot)
            out.append(self.preprocess(image, traj.steps[:i], step.observation.instruction, store))
        return out

    def bootstrap_input(self, traj: Any, store: BlobStore) -> torch.Tensor | None:
        """The state after the last step (its screenshot + every step as history), for the
        value a truncated episode bootstraps from; None when that screenshot is not stored."""
        last = traj.steps[-1] if traj.steps else None
        if last is None or last.next_screenshot_sha256 is None:
            return None
        try:
            image = screen(store, last.next_screenshot_sha256)
        except BlobNotFound:
            return None
        return self.preprocess(image, traj.steps, last.observation.instruction, store)

    def values(self, obs: torch.Tensor, instructions: list[str]) -> torch.Tensor:
        """V(s) [N] of preprocessed inputs."""
        return self(obs, instructions)["value"]

    def _tokens(self, instructions: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        ids = [tokenize(s, int(self.cfg["embed_buckets"])) for s in instructions]
        offsets = torch.tensor([0] + [len(i) for i in ids[:-1]]).cumsum(0)
        return torch.tensor([t for i in ids for t in i]), offsets

    def forward(self, obs: torch.Tensor, instructions: list[str]) -> dict[str, torch.Tensor]:
        """obs [N, C + 3 (+ 1 with ``ground``), 8G, 8G] uint8 -> logits of every head and the value [N]:
        type [N, K], cells [N, P, G*G], direction [N, D], key [N, Keys], start [N, L], length [N, L, M]."""
        summary = obs[:, -1].flatten(1)[:, :self.n_summary].to(torch.float32)
        h = obs[:, :self.n_image].to(torch.float32) / 255.0
        for conv in self.convs[:-1]:
            h = F.relu(conv(h))
        emb = self.embed(*self._tokens(instructions))
        hist = F.relu(self.history(torch.log1p(summary)))
        context = torch.cat([emb, hist], -1)
        extra = [h]
        if self.ground:
            extra.append(self._grounded(obs[:, self.n_image], instructions, context))
        if self.cfg["coords"]:
            ramp = torch.linspace(-1.0, 1.0, self.grid)
            extra += [ramp.view(1, 1, -1, 1).expand(len(obs), 1, self.grid, self.grid),
                      ramp.view(1, 1, 1, -1).expand(len(obs), 1, self.grid, self.grid)]
        h = F.relu(self.convs[-1](torch.cat(extra, 1)))
        gamma, beta = self.film(context).chunk(2, dim=-1)
        h = F.relu(h * (1 + gamma[:, :, None, None]) + beta[:, :, None, None])
        pooled = torch.cat([h.mean(dim=(2, 3)), h.amax(dim=(2, 3)), *self._keypoints(h), emb, hist], dim=-1)
        trunk = self.trunk(pooled)
        out = {"type": self.type_head(trunk), "cells": self.loc_head(h).flatten(2),
               "value": self.value_head(pooled).squeeze(-1)}
        if "scroll" in self.types:
            out["direction"] = self.direction_head(trunk)
        if "hotkey" in self.types:
            out["key"] = self.key_head(trunk)
        if "type" in self.types:
            out["start"], out["length"] = self._span_logits(trunk, instructions, summary)
        return out

    def _grounded(self, plane: torch.Tensor, instructions: list[str], context: torch.Tensor) -> torch.Tensor:
        """The grounding plane [N, 8G, 8G] -> [N, ground_dim, G, G]: per channel, a weighed sum
        over words of each word's match map, its sharpened map (1 at the word's best cell) and
        that map's row maxima (the whole line of the word: a checkbox sits left of its label)."""
        n, k, cells = len(plane), self.n_words, self.grid ** 2
        maps = plane.flatten(1)[:, :k * cells].to(torch.float32).view(n, k, cells) / 255.0
        feats = [word_features(s, k, int(self.cfg["embed_buckets"])) for s in instructions]
        ids = torch.from_numpy(np.stack([f[0] for f in feats]))  # [N, k, 3]
        flags = torch.from_numpy(np.stack([f[1] for f in feats]))  # [N, k, 3]
        tok = sum(embed(ids[..., j]) for j, embed in enumerate(self.word_embed))
        tok = tok + self.word_pos.weight + self.word_flags(flags) + self.word_query(context).unsqueeze(1)
        weight = self.word_out(torch.tanh(tok)) * flags[..., 2:]  # [N, k, 3 * dim]; no word, no weight
        weight = weight.view(n, k, -1, 3)
        out = torch.einsum("nkdc,nkcg->ndg", weight, map_features(maps, self.grid))
        return out.view(n, -1, self.grid, self.grid)

    def _keypoints(self, h: torch.Tensor) -> list[torch.Tensor]:
        """With ``keypoints``: two [N, C], each channel's expected column and row in [-1, 1] under
        a softmax over its G x G cells (no temperature: features of order 1 give a flat softmax
        and keypoints near the centre; a learnt one was not tried); else nothing."""
        if not self.cfg["keypoints"]:
            return []
        weights = torch.softmax(h.flatten(2), dim=-1).view_as(h)  # [N, C, G, G]
        ramp = torch.linspace(-1.0, 1.0, self.grid)
        return [(weights.sum(2) * ramp).sum(-1), (weights.sum(3) * ramp).sum(-1)]

    def _span_logits(self, trunk: torch.Tensor, instructions: list[str], summary: torch.Tensor
                     ) -> tuple[torch.Tensor, torch.Tensor]:
        """Start-token logits [N, L] and length logits [N, L, M] given the start; impossible
        spans (past the instruction's end) get -inf."""
        L, M = self.max_tokens, self.max_span
        feats = [token_features(s, L, int(self.cfg["embed_buckets"])) for s in instructions]
        ids = torch.from_numpy(np.stack([f[0] for f in feats]))
        flags = torch.from_numpy(np.stack([f[1] for f in feats]))
        typed = torch.log1p(summary[:, -L:]).unsqueeze(-1)
        tok = self.tok_embed(ids) + self.tok_pos.weight + self.tok_proj(torch.cat([flags, typed], -1))
        query = self.span_query(trunk).unsqueeze(1)
        start = self.start_out(torch.tanh(tok + query)).squeeze(-1)
        # length n ends at token i + n - 1: score that end token, the length, and the query
        real = flags[:, :, 2] > 0
        idx = (torch.arange(L)[:, None] + torch.arange(M)[None, :]).clamp(max=L - 1)  # [L, M]
        end_tok = tok[:, idx]  # [N, L, M, e]
        length = self.end_out(torch.tanh(end_tok + self.len_embed.weight + query.unsqueeze(1))).squeeze(-1)
        valid_end = real[:, idx] & ((torch.arange(L)[:, None] + torch.arange(M)[None, :]) < L)
        start = start.masked_fill(~real, NEG)
        length = length.masked_fill(~valid_end, NEG)
        no_tokens = ~real.any(-1)  # an empty instruction: a dummy, never-sampled-from distribution
        start = torch.where(no_tokens[:, None], torch.zeros_like(start), start)
        return start, length

    # ------------------------------------------------------------ actions <-> indices

    def can_represent(self, action: Any, instruction: str | None = None) -> bool:
        """Whether ``evaluate`` can score ``action``; a typed text only when ``instruction`` is
        given and contains it as a token span."""
        kind = getattr(action, "type", None)
        if action is None or kind not in self.types:
            return False
        if kind == "scroll":
            return action.direction in self.cfg["scroll_directions"]
        if kind == "hotkey":
            return action.key in self.cfg["keys"]
        if kind == "type":
            return instruction is None or bool(span_mask(instruction, action.content, self.max_tokens, self.max_span).any())
        return True

    def _cell_of(self, action: Any) -> int:
        return self._cell_at(action.x, action.y)

    def _cell_at(self, x: float, y: float) -> int:
        x0, y0, x1, y1 = self.cfg["crop"]
        col = int((x - x0) / (x1 - x0) * self.grid)
        row = int((y - y0) / (y1 - y0) * self.grid)
        return min(max(row, 0), self.grid - 1) * self.grid + min(max(col, 0), self.grid - 1)

    def _guide_floor(self, points: tuple[tuple[int, float, float], ...], step: int) -> np.ndarray:
        """``guide_floor`` at this step, built once per (guide, step): every decision of a guided task asks."""
        key = (points, step)
        floor = self._guides.get(key)
        if floor is None:
            if len(self._guides) >= 4096:  # a bound, not an LRU: the guides of a run are few
                self._guides.clear()
            floor = guide_floor(points, step, self._cell_at, self.grid)
            floor.setflags(write=False)  # every later decision reads this one array
            self._guides[key] = floor
        return floor

    def _cell_centre(self, cell: int) -> tuple[float, float]:
        x0, y0, x1, y1 = self.cfg["crop"]
        row, col = divmod(cell, self.grid)
        return x0 + (col + 0.5) / self.grid * (x1 - x0), y0 + (row + 0.5) / self.grid * (y1 - y0)

    def _targets(self, actions: list[Any], instructions: list[str]) -> dict[str, torch.Tensor]:
        """Each action as head indices: type, cell, direction, key, and the span mask [N, L, M]."""
        n = len(actions)
        t = {"type": torch.tensor([self.types.index(a.type) for a in actions]),
             "cell": torch.zeros(n, dtype=torch.long), "direction": torch.zeros(n, dtype=torch.long),
             "key": torch.zeros(n, dtype=torch.long), "span": torch.zeros(n, self.max_tokens, self.max_span, dtype=torch.bool)}
        for k, (a, s) in enumerate(zip(actions, instructions)):
            if a.type in POINTER_TYPES:
                t["cell"][k] = self._cell_of(a)
            if a.type == "scroll":
                t["direction"][k] = self.cfg["scroll_directions"].index(a.direction)
            if a.type == "hotkey":
                t["key"][k] = self.cfg["keys"].index(a.key)
            if a.type == "type":
                t["span"][k] = torch.from_numpy(span_mask(s, a.content, self.max_tokens, self.max_span))
        return t

    def _logprob_entropy(self, out: dict[str, torch.Tensor], t: dict[str, torch.Tensor]
                         ) -> tuple[torch.Tensor, torch.Tensor]:
        """The action's log-prob [N] (sum of its factors) and the policy's entropy [N]: H(type)
        plus, for each type, its probability times the entropy of its arguments."""
        type_logp = F.log_softmax(out["type"], -1)
        type_p = type_logp.exp()
        rows = torch.arange(len(t["type"]))
        logprob = type_logp[rows, t["type"]]
        entropy = -(type_p * type_logp).sum(-1)
        arg_logp = torch.zeros_like(logprob)
        cell_logp = F.log_softmax(out["cells"], -1)  # [N, P, G*G]
        cell_h = -(cell_logp.exp() * cell_logp).sum(-1)  # [N, P]
        if "direction" in out:
            dir_logp = F.log_softmax(out["direction"], -1)
            dir_h = -(dir_logp.exp() * dir_logp).sum(-1)
        if "key" in out:
            key_logp = F.log_softmax(out["key"], -1)
        if "start" in out:
            start_logp = F.log_softmax(out["start"], -1)  # [N, L]
            len_logp = F.log_softmax(out["length"], -1)  # [N, L, M]
            span_logp = start_logp.unsqueeze(-1) + len_logp
        for k, name in enumerate(self.types):
            is_k = t["type"] == k
            if name in POINTER_TYPES:
                p = self.pointers.index(name)
                lp, h = cell_logp[rows, p, t["cell"]], cell_h[:, p]
                if name == "scroll":
                    lp, h = lp + dir_logp[rows, t["direction"]], h + dir_h
            elif name == "hotkey":
                lp, h = key_logp[rows, t["key"]], -(key_logp.exp() * key_logp).sum(-1)
            elif name == "type":
                masked = span_logp.masked_fill(~t["span"], NEG).flatten(1)
                lp = torch.where(t["span"].flatten(1).any(-1), torch.logsumexp(masked, -1), torch.zeros_like(logprob))
                h = -(start_logp.exp() * start_logp).sum(-1) \
                    - (start_logp.exp() * (len_logp.exp() * len_logp).sum(-1)).sum(-1)
            else:
                continue
            arg_logp = torch.where(is_k, lp, arg_logp)
            entropy = entropy + type_p[:, k] * h
        return logprob + arg_logp, entropy

    def _sample(self, out: dict[str, torch.Tensor], instructions: list[str], greedy: bool) -> list[Any]:
        def pick(logits: torch.Tensor) -> torch.Tensor:
            return logits.argmax(-1) if greedy else torch.distributions.Categorical(logits=logits).sample()

        type_idx, actions = pick(out["type"]), []
        for k, s in enumerate(instructions):
            name = self.types[int(type_idx[k])]
            if name in POINTER_TYPES:
                x, y = self._cell_centre(int(pick(out["cells"][k, self.pointers.index(name)])))
                if name == "scroll":
                    direction = self.cfg["scroll_directions"][int(pick(out["direction"][k]))]
                    actions.append(A.Scroll(x=x, y=y, direction=direction))
                else:
                    actions.append(POINTER_TYPES[name](x=x, y=y))
            elif name == "hotkey":
                actions.append(A.Hotkey(key=self.cfg["keys"][int(pick(out["key"][k]))]))
            elif name == "type":
                start = int(pick(out["start"][k]))
                n = int(pick(out["length"][k, start])) + 1
                spans = token_spans(s, self.max_tokens)
                actions.append(A.Type(content=(span_text(s, spans, start, n) or "") if spans else ""))
            else:
                actions.append(NOARG_TYPES[name]())
        return actions

    # ------------------------------------------------------------ the Policy interface

    @torch.no_grad()
    def act(self, inputs: list[PolicyInput], greedy: bool = False, explore: Sequence[float] | None = None,
            explore_at: Sequence[Sequence[tuple[int, float, float]]] | None = None) -> list[Decision]:
        """``explore_at`` (per input, the guide's points; producers.tasks.explore_points): the
        floor's share goes near them (``guide_floor`` at the input's step) instead of uniformly."""
        if not inputs:
            return []
        obs = torch.stack([self.preprocess(i.image, i.history, i.instruction) for i in inputs])
        floor = None
        if explore_at is not None and any(explore_at) and "click" in self.pointers:
            # the click head's floor only (the guide holds clicks, producers.tasks.explore_points); the
            # other pointer heads (scroll, ...) keep the uniform one
            floor = torch.full((len(inputs), len(self.pointers), self.grid * self.grid), 1.0 / self.grid ** 2,
                               dtype=torch.float64)
            floor[:, self.pointers.index("click")] = torch.from_numpy(np.stack(
                [self._guide_floor(tuple(map(tuple, at)), len(i.history)) for i, at in zip(inputs, explore_at)]))
        return self.decide(obs, [i.instruction for i in inputs], greedy, explore, floor)

    @torch.no_grad()
    def decide(self, obs: torch.Tensor, instructions: list[str], greedy: bool = False,
               explore: Sequence[float] | None = None, floor: torch.Tensor | None = None) -> list[Decision]:
        """``act`` on already preprocessed inputs (obs [N, C + 3 (+ 1), 8G, 8G] from ``preprocess``).
        ``explore`` (per input, 0 <= e < 1; None: none) mixes a share e of ``floor`` (uniform when
        None) into the pointer cells (``mix_floor``): the action is drawn from that mixture and its
        logprob is the mixture's, the behaviour PPO's importance weights correct for
        (producers.tasks.explore_share). ``greedy`` takes the policy's own argmax: no floor (a
        guided one would move it onto the guide's cells)."""
        out = self(obs, instructions)
        if explore is not None and any(explore) and not greedy:
            e = torch.tensor(list(explore), dtype=torch.float32)
            out = {**out, "cells": mix_floor(out["cells"], e, floor)}
        actions = self._sample(out, instructions, greedy)
        logprob, _ = self._logprob_entropy(out, self._targets(actions, instructions))
        return [Decision(action=a, logprob=float(logprob[k]), value=float(out["value"][k]),
                         raw_output=a.model_dump_json()) for k, a in enumerate(actions)]

    def discretize(self, action: Any) -> tuple:
        """What the heads choose for ``action``: two actions with the same key are the same
        decision for this policy (a click anywhere in a cell is that cell)."""
        if action.type in POINTER_TYPES:
            return (action.type, self._cell_of(action), getattr(action, "direction", None))
        return (action.type, getattr(action, "content", None) if action.type == "type" else getattr(action, "key", None))

    def evaluate(self, obs: torch.Tensor, instructions: list[str], actions: list[Any]
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Re-score stored actions: obs [N, C + 3 (+ 1), 8G, 8G] uint8 (from ``preprocess``) ->
        (logprob [N], value [N], entropy [N]), differentiable. Every action must satisfy
        ``can_represent(action, instruction)``."""
        bad = [a for a, s in zip(actions, instructions) if not self.can_represent(a, s)]
        if bad:
            raise ValueError(f"pixel policy cannot score action {bad[0]!r}")
        out = self(obs, instructions)
        logprob, entropy = self._logprob_entropy(out, self._targets(actions, instructions))
        return logprob, out["value"], entropy

