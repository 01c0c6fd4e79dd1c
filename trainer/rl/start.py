"""Where the PPO learner starts: its checkpoint, else the last published version, else a random
init as version 0, which the learner announces first so rollout workers can start.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from infra.runtime import versions
from infra.runtime.config import ConfigError, json_object
from infra.runtime.consume_loop import CheckpointFile
from infra.runtime.policy import build_policy, load_policy_version
from infra.runtime.settings import Settings
from schemas.blobs import BlobStore
from trainer.core.learner import read_weights, write_weights
from trainer.core.publish import make_version, save_weights
from trainer.rl.config import TrainConfig, place
from trainer.rl.state import PPOState
from trainer.rl.update import make_optimizer

log = logging.getLogger("flywheel.trainer")


def config_not_applied(asked: dict[str, Any], kept: dict[str, Any]) -> dict[str, Any]:
    """The entries of ``asked`` (a trainer's --policy-config) that ``kept`` (the config of the version
    it continues) holds otherwise: a run started from another run's version (the demo's
    --start-from) acts with that version's inputs and heads, whatever its own tasks would give it."""
    return {k: v for k, v in asked.items() if k != "seed" and kept.get(k, v) != v}


def start_policy(cfg: TrainConfig, settings: Settings, store: BlobStore,
                 ckpt: CheckpointFile) -> tuple[Any, torch.optim.Optimizer]:
    """Resume from the checkpoint; else continue the last published version; else a random init
    as version 0. A fresh start writes its first state (``PPOState``) into ``ckpt``."""
    state: PPOState | None = ckpt.checkpoint.state
    if state is not None:
        return resume(cfg, ckpt, state)
    folder = ckpt.path.parent
    published = versions.latest(settings, cfg.policy_name)
    if published is not None:
        policy = load_policy_version(published, store)
        log.info("continuing from published %s v%d", cfg.policy_name, policy.version)
        unapplied = config_not_applied(json_object(cfg.policy_config, "policy_config"), policy.config_dict())
        if unapplied:
            log.warning("the published version keeps its own config: --policy-config's %s differ from it and are not "
                        "applied (they apply to a policy built from random weights)", unapplied)
    else:
        policy = build_policy(cfg.policy_kind, cfg.policy_name, cfg.policy_overrides())
    place(policy, cfg.device, "flywheel train")  # the published version's kind, whatever --policy-kind says
    optimizer = make_optimizer(policy, cfg.lr, cfg.head_lr_mult)
    pv = published or make_version(policy, save_weights(policy, store), parent=None)
    ckpt.checkpoint.state = PPOState(version=policy.version, config=policy.config_dict(),
                                     weights_file=write_weights(folder, 0, policy, optimizer),
                                     announce=None if published else pv.model_dump(mode="json"),
                                     start_version=policy.version, kind=policy.kind)
    ckpt.save()
    return policy, optimizer


def resume(cfg: TrainConfig, ckpt: CheckpointFile, state: PPOState) -> tuple[Any, torch.optim.Optimizer]:
    """The policy and optimiser the checkpoint's weights file holds, on ``cfg.device``."""
    saved = read_weights(ckpt.path.parent, state)
    # the kind this checkpoint holds (recorded since it may differ from --policy-kind: a
    # published language policy continued without the flag); older checkpoints: the flag
    policy = build_policy(state.kind or cfg.policy_kind, cfg.policy_name, state.config)
    policy.load_state_dict(saved["weights"])
    policy.version = state.version
    place(policy, cfg.device, "flywheel train")  # before the optimiser: its state follows its parameters' device
    optimizer = make_optimizer(policy, cfg.lr, cfg.head_lr_mult)
    try:
        optimizer.load_state_dict(saved["optimizer"])
    except ValueError as exc:  # another number of parameter groups: head_lr_mult changed
        raise ConfigError(f"the checkpoint's optimiser does not fit this config ({exc}): resume with the "
                          f"head_lr_mult it was written with, or start a new --policy-name") from None
    log.info("resumed %s v%d from %s at offsets %s", cfg.policy_name, policy.version, ckpt.path,
             ckpt.checkpoint.offsets)
    return policy, optimizer
