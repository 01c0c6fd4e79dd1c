"""The SFT / CT trainers' config, kept apart from trainer.sft.lm_stream so that building the
`flywheel` command line does not import torch."""

from __future__ import annotations

from dataclasses import dataclass

from infra.runtime.config import ConfigError, json_object, opt
from infra.runtime.policy import policy_kind


# The main job's language policy (merged over trainer.policies.lm.model's tiny defaults):
# SmolLM2-135M-Instruct, 64 image tokens per screenshot (64 x 64 pixels in 8 x 8 patches), the
# last 3 screenshots in context, clicks by pointing at one of the 64 patches (written as UI-TARS
# points on the 0..1000 grid; trainer.policies.lm.pointer). Kept here, torch-free, so building a
# config imports no model.
PRETRAINED_LM = {"pretrained": "smollm2-135m", "image_size": 64, "patch": 8, "max_images": 3, "max_new_tokens": 48,
                 "pointer": True, "coord_mode": "1000"}


@dataclass
class LMTrainConfig:
    policy_name: str = opt("lm", "policy to train: its key on flywheel.policy.v1 and its checkpoint folder")
    policy_kind: str = opt("lm", "its kind: a registered kind whose policies write text (the next-token loss needs text)")
    policy_config: str = opt("", "JSON model config when no version is published yet (see trainer.policies.lm.model)")
    pretrained: str = opt("smollm2-135m", "checkpoint of that first model: a named one (smollm2-135m) or a local Hugging Face folder; empty: the tiny model of policy_config")
    lr: float = opt(1e-4, "AdamW learning rate")
    weight_decay: float = opt(0.0, "AdamW weight decay")
    batch_trajectories: int = opt(8, "trajectories per update")
    max_wait_s: float = opt(30.0, "update with fewer trajectories once the first has waited this long")
    minibatch_samples: int = opt(8, "sequences per forward pass (gradients accumulate over the update)")
    max_grad_norm: float = opt(1.0, "gradient clipping norm")
    group_id: str = opt("", "consumer group (default: <mode>-<policy_name>)")
    max_updates: int = opt(0, "stop after this many updates (0: run until stopped)")
    idle_exit_s: float = opt(0.0, "stop after this long without records (0: never)")
    device: str = opt("cpu", "torch device of the model: cpu, cuda or cuda:N")
    poll_s: float = opt(0.5, "longest wait for records in one poll")
    max_update_s: float = opt(1800.0, "longest update before the group gives the trainer's partitions away (the consumer's max.poll.interval.ms)")

    def validate(self) -> "LMTrainConfig":
        if self.batch_trajectories < 1 or self.minibatch_samples < 1 or self.lr <= 0:
            raise ConfigError("batch_trajectories and minibatch_samples must be >= 1 and lr > 0")
        if not 1 <= self.max_update_s <= 86400:
            raise ConfigError(f"max_update_s must be within [1, 86400] seconds, got {self.max_update_s}")
        if not policy_kind(self.policy_kind).chat:
            raise ConfigError(f"policy_kind {self.policy_kind!r} does not write text: SFT / CT train the next-token "
                              "loss of a text-writing kind (lm)")
        from trainer.rl.config import check_device  # torch: not needed to build the command line

        check_device(self.device, self.policy_kind, "flywheel sft / ct")
        return self

    def initial_config(self) -> dict:
        """The model config used when neither a checkpoint nor a published version exists."""
        extra = json_object(self.policy_config, "policy_config")
        return {**(PRETRAINED_LM if self.pretrained else {}), **({"pretrained": self.pretrained} if self.pretrained else {}),
                **extra}
