"""`flywheel merge`: parameter interpolation of published versions into a new version.

theta = sum_k alpha_k * theta_k (UI-TARS-2 merges vertical agents trained from one base this way).
The alphas are >= 0 and sum to 1; every version must have the same kind, config, keys and shapes.
Each input's weights are hash-verified before use; the result is published like any trained
version, with ``parent`` = the version of largest alpha and the full recipe in its metrics.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Sequence

import torch

from infra.runtime.errors import UserError
from infra.runtime.policy import build_policy, policy_kind, weights_bytes
from trainer.core import metric_names as M
from schemas.blobs import BlobStore
from infra.runtime import versions
from infra.runtime.kafka_clients import DeliveryTracker, make_producer
from trainer.core.publish import publish_version

log = logging.getLogger("flywheel.merge")
ALPHA_TOLERANCE = 1e-6
INIT_ONLY_KEYS = frozenset({"seed"})  # config keys that shape initial weights, not the architecture


class MergeError(UserError):
    """The versions or alphas cannot be merged; the message says why."""


def validate_alphas(alphas: Sequence[float], n: int) -> list[float]:
    alphas = [float(a) for a in alphas]
    if len(alphas) != n:
        raise MergeError(f"{n} versions but {len(alphas)} alphas: give one alpha per version")
    if n < 1:
        raise MergeError("nothing to merge: give at least one version")
    negative = [a for a in alphas if not a >= 0]  # also catches NaN
    if negative:
        raise MergeError(f"alphas must be >= 0, got {alphas}")
    if abs(sum(alphas) - 1.0) > ALPHA_TOLERANCE:
        raise MergeError(f"alphas must sum to 1 (within {ALPHA_TOLERANCE:g}), got {alphas} summing to {sum(alphas):.9g}")
    return alphas


def interpolate(state_dicts: Sequence[dict[str, torch.Tensor]], alphas: Sequence[float]) -> dict[str, torch.Tensor]:
    """sum_k alphas[k] * state_dicts[k], key by key, accumulated in float64, cast back.

    Every state dict must have the same keys, shapes and dtypes. Non-floating tensors (integer
    buffers) cannot be interpolated: they must be equal across inputs and are copied.
    """
    alphas = validate_alphas(alphas, len(state_dicts))
    keys = set(state_dicts[0])
    for k, sd in enumerate(state_dicts[1:], start=1):
        if set(sd) != keys:
            missing, extra = sorted(keys - set(sd)), sorted(set(sd) - keys)
            raise MergeError(f"input {k} has different parameters than input 0: missing {missing[:5]}, extra {extra[:5]}")
    merged: dict[str, torch.Tensor] = {}
    for key in state_dicts[0]:
        first = state_dicts[0][key]
        for k, sd in enumerate(state_dicts[1:], start=1):
            if sd[key].shape != first.shape or sd[key].dtype != first.dtype:
                raise MergeError(f"parameter {key!r}: input 0 is {tuple(first.shape)} {first.dtype}, "
                                 f"input {k} is {tuple(sd[key].shape)} {sd[key].dtype}")
        if not first.is_floating_point():
            if any(not torch.equal(sd[key], first) for sd in state_dicts[1:]):
                raise MergeError(f"non-floating parameter {key!r} differs between inputs and cannot be interpolated")
            merged[key] = first.clone()
            continue
        acc = torch.zeros(first.shape, dtype=torch.float64)
        for a, sd in zip(alphas, state_dicts):
            acc += a * sd[key].detach().to(torch.float64)
        merged[key] = acc.to(first.dtype)
    return merged


@dataclass
class MergePlan:
    """What a merge reads and what it records."""

    policy: str
    versions: list[int]
    alphas: list[float]

    @property
    def parent(self) -> int:
        return self.versions[max(range(len(self.alphas)), key=lambda i: self.alphas[i])]

    def metrics(self) -> dict[str, float]:
        return {M.merge_alpha(v): a for v, a in zip(self.versions, self.alphas)}


def full_config(pv) -> dict:
    """A version's model config with the defaults of its time filled in (a key added later, such as
    the language policy's "pointer", is absent from older versions' configs)."""
    return policy_kind(pv.kind).full_config(pv.config)


def differs(key: str, a: dict, b: dict) -> bool:
    """Whether two versions' configs disagree on ``key`` in a way that matters to a merge: not the
    initial seed, nor a font hash one of them predates (``ground_font_sha256``: a version published
    before fonts were pinned is unpinned, not different)."""
    # local: loads Pillow, needed only on this path
    from trainer.policies.pixel.ground import FONT_SHA256

    if key in INIT_ONLY_KEYS or (key == FONT_SHA256 and (key not in a or key not in b)):
        return False
    return a.get(key) != b.get(key)


def merge_versions(pvs: list, alphas: Sequence[float], store) -> tuple[dict[str, torch.Tensor], dict]:
    """Verify and load each version's weights, check they agree, interpolate; -> (state, config)."""
    from safetensors.torch import load as load_safetensors

    alphas = validate_alphas(alphas, len(pvs))
    kinds = {pv.kind for pv in pvs}
    if len(kinds) != 1:
        raise MergeError(f"cannot merge different policy kinds: {sorted(kinds)}")
    configs = [full_config(pv) for pv in pvs]
    for pv, config in zip(pvs[1:], configs[1:]):
        diff = sorted(k for k in set(config) | set(configs[0]) if differs(k, config, configs[0]))
        if diff:
            raise MergeError(f"v{pvs[0].version} and v{pv.version} have different model configs ({', '.join(diff)})")
    states = [load_safetensors(weights_bytes(pv, store)) for pv in pvs]  # refuses a tampered file
    return interpolate(states, alphas), dict(pvs[0].config)


def run_merge(settings, plan: MergePlan):
    """Find, verify, interpolate and publish; -> the new PolicyVersion (latest known + 1)."""

    validate_alphas(plan.alphas, len(plan.versions))
    known = versions.history(settings, plan.policy, plan.versions)
    pvs = [known[v] for v in plan.versions]
    store = BlobStore(settings.blob_root)
    state, config = merge_versions(pvs, plan.alphas, store)
    try:
        merged = build_policy(pvs[0].kind, plan.policy, config)
    except ValueError as exc:  # e.g. a grounded version whose font resolves to another file here
        raise MergeError(f"cannot rebuild {plan.policy} v{pvs[0].version} here: {exc}") from None
    merged.load_state_dict(state, strict=True)
    merged.version = versions.next_version(settings, plan.policy, max(known))
    pv = publish_version(settings, make_producer(settings), DeliveryTracker(), store, merged, plan.parent, plan.metrics())
    log.info("published %s v%d = %s", pv.policy, pv.version,
             " + ".join(f"{a:g} * v{v}" for v, a in zip(plan.versions, plan.alphas)))
    return pv
