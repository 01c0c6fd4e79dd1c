"""The policy interface every model implements (pixel CNN, Hugging Face LM), and the registry.

Invariant: ``act`` returns, for each decision, the behaviour log-prob of exactly the action it
returns (the sum over the action's factors / tokens) under the weights of ``self.version``;
the rollout worker stores it on the step so the trainer can correct off-policy data.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

import numpy as np

from schemas.events import Step


@dataclass
class PolicyInput:
    """What the agent sees at one step."""

    image: np.ndarray  # H x W x 3 uint8 screenshot, the observation's screen size
    instruction: str
    screen_width: int
    screen_height: int
    history: list[Step] = field(default_factory=list)  # earlier steps of this episode, in order


@dataclass
class Decision:
    """What the agent does at one step."""

    action: Any  # schemas.actions.Action, or None when the output did not parse
    logprob: float
    value: float | None = None
    thought: str = ""
    raw_output: str = ""
    parse_error: str | None = None


class Policy(Protocol):
    kind: str  # "pixel" | "lm"
    name: str
    version: int

    def act(self, inputs: list[PolicyInput], greedy: bool = False) -> list[Decision]:
        """Sample (or argmax) one decision per input, batched."""

    def config_dict(self) -> dict[str, Any]:
        """Everything needed to rebuild the model before loading its weights."""


POLICY_REGISTRY: dict[str, Callable[..., Policy]] = {}


def register_policy(kind: str):
    def deco(factory):
        POLICY_REGISTRY[kind] = factory
        return factory
    return deco
