"""The pixel policy: a small CNN over a downscaled screenshot plus a hashed-token embedding of
the instruction, with a factorised action head (action type; click cell on a G x G grid) and a
value head. Small enough that ``act`` runs inside a rollout worker on two CPU cores.

Invariant: a Click emitted by ``act`` sits at its grid cell's centre, and ``evaluate`` maps a
stored pointer action back to the cell containing it, so ``evaluate`` reproduces the behaviour
log-prob exactly (up to float error) for the same weights.

The screenshot is cropped to ``crop`` (fractions of the screen: x0, y0, x1, y1; by default
MiniWoB's 160 x 160 area below the instruction bar) and resized to ``8 G`` pixels square (by
default 160: no resize, so 40 px buttons keep legible labels - downscaled colour input learned
"click a button" but not "click ONE, not TWO"): three stride-2 convolutions then give one feature
per grid cell, and the location logits come from a ``loc_kernel`` convolution over those
features (translation-equivariant: "the ONE button looks like this" transfers across positions,
which is what makes click-test-2 learnable in under a thousand episodes). The instruction
modulates the features (FiLM), so one policy serves several tasks.
"""

from __future__ import annotations

import re
import zlib
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from torch import nn

from schemas import actions as A
from infra.policy import Decision, PolicyInput, register_policy

POINTER_TYPES = {"click": A.Click, "left_double": A.LeftDouble, "right_single": A.RightSingle,
                 "long_press": A.LongPress}
NOARG_TYPES = {"wait": A.Wait, "finished": A.Finished, "call_user": A.CallUser, "press_back": A.PressBack,
               "press_home": A.PressHome, "press_enter": A.PressEnter}

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
    "seed": 0,                   # initial weights
}


def tokenize(text: str, buckets: int) -> list[int]:
    """Stable hashed word ids (crc32, not Python's salted hash); bucket 0 means 'no words'."""
    words = re.findall(r"[a-z0-9]+", text.lower())
    return [1 + zlib.crc32(w.encode()) % (buckets - 1) for w in words] or [0]


class PixelPolicy(nn.Module):
    kind = "pixel"

    def __init__(self, name: str = "pixel", config: dict[str, Any] | None = None, version: int = 0) -> None:
        super().__init__()
        cfg = {**DEFAULT_CONFIG, **(config or {})}
        unknown = [t for t in cfg["action_types"] if t not in POINTER_TYPES and t not in NOARG_TYPES]
        if unknown or not cfg["action_types"]:
            raise ValueError(f"pixel policy cannot emit action types {unknown or '[]'}; "
                             f"choose from {sorted(POINTER_TYPES) + sorted(NOARG_TYPES)}")
        self.cfg, self.name, self.version = cfg, name, version
        self.grid, self.side = int(cfg["grid"]), 8 * int(cfg["grid"])
        self.types: list[str] = list(cfg["action_types"])
        c_in = 1 if cfg["grayscale"] else 3
        c1, c2, c3 = cfg["channels"]
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(cfg["seed"]))
            self.convs = nn.ModuleList([
                nn.Conv2d(c_in, c1, 5, stride=2, padding=2),
                nn.Conv2d(c1, c2, 3, stride=2, padding=1),
                nn.Conv2d(c2, c3, 3, stride=2, padding=1),
                nn.Conv2d(c3, c3, 3, stride=1, padding=1),
            ])
            self.embed = nn.EmbeddingBag(int(cfg["embed_buckets"]), int(cfg["embed_dim"]), mode="mean")
            self.film = nn.Linear(int(cfg["embed_dim"]), 2 * c3)
            k = int(cfg["loc_kernel"])
            self.loc_head = nn.Conv2d(c3, 1, k, padding=k // 2)
            trunk = 2 * c3 + int(cfg["embed_dim"])
            self.type_head = nn.Linear(trunk, len(self.types))
            self.value_head = nn.Sequential(nn.Linear(trunk, 64), nn.ReLU(), nn.Linear(64, 1))
            # start uniform over cells and types: exploration comes from the policy, not from luck
            for head in (self.loc_head, self.type_head):
                nn.init.zeros_(head.weight)
                nn.init.zeros_(head.bias)
            nn.init.zeros_(self.film.weight)
            nn.init.zeros_(self.film.bias)

    # ------------------------------------------------------------ inputs

    def config_dict(self) -> dict[str, Any]:
        return dict(self.cfg)

    def preprocess(self, image: np.ndarray) -> torch.Tensor:
        """H x W x 3 uint8 screenshot -> [C, 8G, 8G] uint8 (cropped, resized)."""
        h, w = image.shape[:2]
        x0, y0, x1, y1 = self.cfg["crop"]
        img = Image.fromarray(np.ascontiguousarray(image[..., :3]))
        img = img.crop((round(x0 * w), round(y0 * h), round(x1 * w), round(y1 * h)))
        img = img.convert("L" if self.cfg["grayscale"] else "RGB").resize((self.side, self.side), Image.BILINEAR)
        arr = np.asarray(img, dtype=np.uint8)
        arr = arr[None] if arr.ndim == 2 else arr.transpose(2, 0, 1)
        return torch.from_numpy(arr.copy())

    def _tokens(self, instructions: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        ids = [tokenize(s, int(self.cfg["embed_buckets"])) for s in instructions]
        offsets = torch.tensor([0] + [len(i) for i in ids[:-1]]).cumsum(0)
        return torch.tensor([t for i in ids for t in i]), offsets

    def forward(self, images: torch.Tensor, instructions: list[str]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """images [N, C, 8G, 8G] uint8 -> (type logits [N, K], cell logits [N, G*G], value [N])."""
        h = images.to(torch.float32) / 255.0
        for conv in self.convs:
            h = F.relu(conv(h))
        emb = self.embed(*self._tokens(instructions))
        gamma, beta = self.film(emb).chunk(2, dim=-1)
        h = F.relu(h * (1 + gamma[:, :, None, None]) + beta[:, :, None, None])
        cell_logits = self.loc_head(h).flatten(1)
        pooled = torch.cat([h.mean(dim=(2, 3)), h.amax(dim=(2, 3)), emb], dim=-1)
        return self.type_head(pooled), cell_logits, self.value_head(pooled).squeeze(-1)

    # ------------------------------------------------------------ actions <-> indices

    def can_represent(self, action: Any) -> bool:
        return action is not None and getattr(action, "type", None) in self.types

    def _cell_of(self, action: Any) -> int:
        x0, y0, x1, y1 = self.cfg["crop"]
        col = int((action.x - x0) / (x1 - x0) * self.grid)
        row = int((action.y - y0) / (y1 - y0) * self.grid)
        return min(max(row, 0), self.grid - 1) * self.grid + min(max(col, 0), self.grid - 1)

    def _action(self, type_idx: int, cell: int) -> Any:
        name = self.types[type_idx]
        if name in NOARG_TYPES:
            return NOARG_TYPES[name]()
        x0, y0, x1, y1 = self.cfg["crop"]
        row, col = divmod(cell, self.grid)
        return POINTER_TYPES[name](x=x0 + (col + 0.5) / self.grid * (x1 - x0),
                                   y=y0 + (row + 0.5) / self.grid * (y1 - y0))

    def _pointer_mask(self) -> torch.Tensor:
        return torch.tensor([t in POINTER_TYPES for t in self.types], dtype=torch.float32)

    # ------------------------------------------------------------ the Policy interface

    @torch.no_grad()
    def act(self, inputs: list[PolicyInput], greedy: bool = False) -> list[Decision]:
        if not inputs:
            return []
        images = torch.stack([self.preprocess(i.image) for i in inputs])
        type_logits, cell_logits, values = self(images, [i.instruction for i in inputs])
        type_dist, cell_dist = torch.distributions.Categorical(logits=type_logits), torch.distributions.Categorical(logits=cell_logits)
        type_idx = type_logits.argmax(-1) if greedy else type_dist.sample()
        cell = cell_logits.argmax(-1) if greedy else cell_dist.sample()
        is_pointer = self._pointer_mask()[type_idx]
        logprob = type_dist.log_prob(type_idx) + is_pointer * cell_dist.log_prob(cell)
        out = []
        for k in range(len(inputs)):
            action = self._action(int(type_idx[k]), int(cell[k]))
            out.append(Decision(action=action, logprob=float(logprob[k]), value=float(values[k]),
                                raw_output=f"{action.type}(cell={int(cell[k])})" if is_pointer[k] else action.type))
        return out

    def evaluate(self, images: torch.Tensor, instructions: list[str], actions: list[Any]
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Re-score stored actions: images [N, C, 8G, 8G] uint8 (from ``preprocess``) ->
        (logprob [N], value [N], entropy [N]), differentiable. Every action must satisfy
        ``can_represent``."""
        bad = [a for a in actions if not self.can_represent(a)]
        if bad:
            raise ValueError(f"pixel policy cannot score action {bad[0]!r}")
        type_idx = torch.tensor([self.types.index(a.type) for a in actions])
        cell = torch.tensor([self._cell_of(a) if a.type in POINTER_TYPES else 0 for a in actions])
        type_logits, cell_logits, values = self(images, instructions)
        type_dist, cell_dist = torch.distributions.Categorical(logits=type_logits), torch.distributions.Categorical(logits=cell_logits)
        pointer = self._pointer_mask()
        logprob = type_dist.log_prob(type_idx) + pointer[type_idx] * cell_dist.log_prob(cell)
        # factorised entropy: H(type) + P(pointer type) * H(cell)
        entropy = type_dist.entropy() + (type_dist.probs * pointer).sum(-1) * cell_dist.entropy()
        return logprob, values, entropy


@register_policy("pixel")
def make_pixel_policy(name: str = "pixel", config: dict[str, Any] | None = None) -> PixelPolicy:
    return PixelPolicy(name=name, config=config)
