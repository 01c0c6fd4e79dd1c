"""Build a policy by kind, or load a published version after checking its weights' sha256.

The rollout workers and the policy server code against exactly these two functions:

    policy = build_policy("pixel", "pixel-miniwob", config)
    policy = load_policy_version(pv, BlobStore(settings.blob_root))

A policy is a ``torch.nn.Module`` implementing ``base.Policy``; its weights travel as a
safetensors file of ``state_dict()`` in the content-addressed blob store.
"""

from __future__ import annotations

import hashlib
import importlib
from typing import Any

from infra.errors import UserError
from schemas.blobs import BlobNotFound, BlobStore
from schemas.events import PolicyVersion
from trainer.policies.base import POLICY_REGISTRY, Policy

# kind -> module that registers it (imported on first use so "pixel" never pulls in transformers)
KIND_MODULES = {"pixel": "trainer.policies.pixel", "lm": "trainer.policies.lm"}


class PolicyIntegrityError(UserError):
    """Downloaded weights do not hash to the sha256 their PolicyVersion announced."""


def build_policy(kind: str, name: str, config: dict[str, Any] | None = None) -> Policy:
    """A fresh policy of ``kind`` (random init from ``config['seed']``), version 0."""
    if kind not in POLICY_REGISTRY and kind in KIND_MODULES:
        importlib.import_module(KIND_MODULES[kind])
    if kind not in POLICY_REGISTRY:
        raise UserError(f"unknown policy kind {kind!r}; known: {', '.join(sorted(set(POLICY_REGISTRY) | set(KIND_MODULES)))}")
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
