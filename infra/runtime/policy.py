"""The policy interface every model implements (pixel CNN, Hugging Face LM), its registry, and
the two functions rollout workers, policy servers and trainers build policies with:

    policy = build_policy("pixel", "pixel-miniwob", config)
    policy = load_policy_version(pv, BlobStore(settings.blob_root))

Implementations live in trainer.policies and are found by kind through the entry-point group
``flywheel.policies`` (pyproject.toml), so this low layer never imports the trainer and a user's
own package can add a kind. A policy is a ``torch.nn.Module``; its weights travel as a
safetensors file of ``state_dict()`` in the content-addressed blob store.

Invariant: ``act`` returns, for each decision, the behaviour log-prob of exactly the action it
returns (the sum over the action's factors / tokens) under the weights of ``self.version``;
the rollout worker stores it on the step so the trainer can correct off-policy data.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any, Callable, Protocol

import numpy as np

from infra.runtime.errors import UserError
from schemas.blobs import BlobNotFound, BlobStore
from schemas.events import PolicyVersion, Step


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


ENTRY_POINT_GROUP = "flywheel.policies"  # kind -> module that registers it, imported on first use

POLICY_REGISTRY: dict[str, Callable[..., Policy]] = {}


def register_policy(kind: str):
    def deco(factory):
        POLICY_REGISTRY[kind] = factory
        return factory
    return deco


class PolicyIntegrityError(UserError):
    """Downloaded weights do not hash to the sha256 their PolicyVersion announced."""


def build_policy(kind: str, name: str, config: dict[str, Any] | None = None) -> Policy:
    """A fresh policy of ``kind`` (random init from ``config['seed']``), version 0."""
    if kind not in POLICY_REGISTRY:
        found = {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}
        if kind not in found:
            known = ", ".join(sorted(set(POLICY_REGISTRY) | set(found)))
            raise UserError(f"unknown policy kind {kind!r}; known: {known}")
        found[kind].load()  # importing the module registers the kind
    return POLICY_REGISTRY[kind](name=name, config=config)


def weights_bytes(pv: PolicyVersion, store: BlobStore) -> bytes:
    """The safetensors bytes of ``pv``, refused unless they hash to ``pv.sha256``."""
    try:
        data = store.get(pv.sha256)
    except BlobNotFound:
        raise UserError(f"weights of {pv.policy} v{pv.version} not found in the blob store "
                        f"(sha256 {pv.sha256}, uri {pv.uri})") from None
    actual = hashlib.sha256(data).hexdigest()
    if actual != pv.sha256:
        raise PolicyIntegrityError(
            f"refusing weights of {pv.policy} v{pv.version}: {pv.uri} hashes to {actual}, "
            f"but the policy version announced {pv.sha256} (tampered or corrupt file)")
    return data


def load_policy_version(pv: PolicyVersion, store: BlobStore) -> Policy:
    """Download, verify and load the weights of a published version."""
    from safetensors.torch import load as load_safetensors

    data = weights_bytes(pv, store)
    policy = build_policy(pv.kind, pv.policy, pv.config)
    policy.load_state_dict(load_safetensors(data), strict=True)  # type: ignore[attr-defined]
    policy.version = pv.version
    if hasattr(policy, "eval"):
        policy.eval()
    return policy
