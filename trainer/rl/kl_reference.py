"""The frozen reference policy of the KL penalty (``kl_coef`` > 0): version ``cfg.kl_ref_version``,
else the version this trainer first started from (pi_sft after a cold start), fixed in the
checkpoint at the first penalised update so a restart keeps the same anchor. It is loaded at the
first update (v0 of a fresh start is announced by then); rank 0 scores each batch under it once
and the log-probs travel with the batch.
"""

from __future__ import annotations

import logging

import torch

from infra.runtime import versions
from infra.runtime.config import ConfigError
from infra.runtime.policy import load_policy_version
from infra.runtime.settings import Settings
from schemas.blobs import BlobStore
from trainer.rl.config import TrainConfig
from trainer.rl.state import PPOState
from trainer.rl.update import Batch, reference_logprobs

log = logging.getLogger("flywheel.trainer")

SCORING_FREE_KEYS = frozenset({"seed", "max_new_tokens"})  # the start of the weights, the sampling: not the inputs


def reference_mismatch(policy, reference) -> str | None:
    """Why ``reference`` cannot score ``policy``'s steps (None: it can). It reads the policy's own
    inputs (rendered tokens, preprocessed screens), so its kind and every config key that shapes
    them must agree: another tokenizer, pointer or coordinate mode would index other tokens."""
    if reference.kind != policy.kind:
        return f"it is a {reference.kind} policy, this one is {policy.kind}"
    mine, theirs = policy.config_dict(), reference.config_dict()
    differ = sorted(k for k in set(mine) | set(theirs) if k not in SCORING_FREE_KEYS and mine.get(k) != theirs.get(k))
    return f"its config differs in {', '.join(differ)}" if differ else None


def anchor_version(cfg: TrainConfig, state: PPOState) -> int:
    """The reference's version: the configured one, else the state's (its start version the first time)."""
    if cfg.kl_ref_version >= 0:
        return cfg.kl_ref_version
    if state.kl_ref_version is None:
        state.kl_ref_version = state.start_version
    return state.kl_ref_version


def load_reference(cfg: TrainConfig, settings: Settings, store: BlobStore, version: int, policy):
    """Version ``version`` of the policy, frozen on ``cfg.device``; ConfigError when it cannot
    score ``policy``'s steps."""
    reference = load_policy_version(versions.history(settings, cfg.policy_name, [version])[version], store)
    why = reference_mismatch(policy, reference)
    if why is not None:
        raise ConfigError(f"the KL reference {cfg.policy_name} v{version} cannot score this policy's steps: {why}; "
                          "name a version of the same model and config with --kl-ref-version")
    reference.requires_grad_(False)
    reference.to(cfg.device)
    log.info("KL penalty %.3g against %s v%d", cfg.kl_coef, cfg.policy_name, version)
    return reference


class KLReference:
    """The reference's log-probs of a batch's steps (``logprobs``), None without a penalty."""

    def __init__(self, cfg: TrainConfig, settings: Settings, store: BlobStore) -> None:
        self.cfg, self.settings, self.store = cfg, settings, store
        self.reference = None  # the frozen policy, loaded at the first penalised update

    def logprobs(self, batch: Batch, state: PPOState, policy) -> torch.Tensor | None:
        if self.cfg.kl_coef <= 0:
            return None
        if self.reference is None:
            self.reference = load_reference(self.cfg, self.settings, self.store, anchor_version(self.cfg, state), policy)
        return reference_logprobs(self.reference, batch)
