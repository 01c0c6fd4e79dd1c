"""The SFT / CT trainers' config, kept apart from trainer.lm_stream so that building the
`flywheel` command line does not import torch."""

from __future__ import annotations

from dataclasses import dataclass

from infra.config import ConfigError, opt


@dataclass
class LMTrainConfig:
    policy_name: str = opt("lm", "policy to train: its key on flywheel.policy.v1 and its checkpoint folder")
    policy_config: str = opt("", "JSON model config when no version is published yet (see trainer.policies.lm)")
    lr: float = opt(1e-4, "AdamW learning rate")
    weight_decay: float = opt(0.0, "AdamW weight decay")
    batch_trajectories: int = opt(8, "trajectories per update")
    max_wait_s: float = opt(30.0, "update with fewer trajectories once the first has waited this long")
    minibatch_samples: int = opt(8, "sequences per forward pass (gradients accumulate over the update)")
    max_grad_norm: float = opt(1.0, "gradient clipping norm")
    group_id: str = opt("", "consumer group (default: <mode>-<policy_name>)")
    max_updates: int = opt(0, "stop after this many updates (0: run until stopped)")
    idle_exit_s: float = opt(0.0, "stop after this long without records (0: never)")
    device: str = opt("cpu", "torch device")
    poll_s: float = opt(0.5, "longest wait for records in one poll")

    def validate(self) -> "LMTrainConfig":
        if self.batch_trajectories < 1 or self.minibatch_samples < 1 or self.lr <= 0:
            raise ConfigError("batch_trajectories and minibatch_samples must be >= 1 and lr > 0")
        return self
