"""The typed config of `flywheel bc` (trainer.sft.bc), apart so the CLI need not import torch.

epochs, lr and minibatch_size default per policy kind (0: the kind's default, ``PolicyKind.bc_*``):
the pixel policy learns from scratch at a large step size (40 epochs at 1e-2), the pretrained
language policy is fine-tuned for a few epochs at 1e-4 (docs/language-policy.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from infra.runtime.config import ConfigError, json_object, opt
from infra.runtime.policy import policy_kind
from producers.suites import get_suite, hotkeys
from trainer.rl.config import check_device


@dataclass
class BCConfig:
    policy_name: str = opt("pixel-miniwob", "policy name pi_sft is published under (the PPO trainer's)")
    suite: str = opt("default", "task suite: its tasks' demonstrations are used and its action heads built")
    tasks: list[str] = opt([], "only these tasks' demonstrations (default: the suite's)")
    demos_per_task: int = opt(20, "at most this many demonstrations per task (WGE used 10)")
    demos_from: list[str] = opt([], "only demonstrations by these policies: human (every human:<name> of the Annotate "
                                    "view), human:<name>, or a policy's name (default: any policy's)")
    policy_kind: str = opt("pixel", "policy kind to clone into (a registered kind): the pixel policy, or the language policy (lm)")
    pretrained: str = opt("smollm2-135m", "policy_kind lm: the checkpoint to start from, a named one (smollm2-135m) or a local Hugging Face folder; empty: the tiny model of policy_config")
    policy_config: str = opt("", "JSON object merged into the policy's config")
    epochs: int = opt(0, "passes over the demonstration steps (0: pixel 40, lm 6)")
    lr: float = opt(0.0, "learning rate (0: pixel 1e-2 with Adam, lm 1e-4 with AdamW; "
                         "tests/e2e/test_bc_pixel.py: 3e-3 underfits 20 demos in 40 epochs)")
    minibatch_size: int = opt(0, "steps per gradient step (0: pixel 32, lm 8)")
    train_budget_s: float = opt(0.0, "stop after the epoch in which training passed this many seconds (at least one "
                                     "epoch runs; 0: every epoch): the demo sets it so SFT ends within its share of --minutes")
    adapter_lr_mult: float = opt(10.0, "policy_kind lm: learning rate of the patch adapter and value head (trained from scratch) as a multiple of lr")
    shift_copies: int = opt(0, "policy_kind lm: translated copies of each demonstration's first screen and click (trainer.core.augment; 0: off)")
    shift_frac: float = opt(0.3, "largest translation of those copies, as a fraction of the screen side")
    seed: int = opt(0, "seed of the initial weights and of the minibatch order")
    device: str = opt("cpu", "policy_kind lm: torch device to train on (cpu, cuda or cuda:N); the pixel policy trains on "
                             "the CPU (so FLYWHEEL_DEVICE=cuda, meant for a language-policy trainer, refuses a pixel bc)")
    torch_threads: int = opt(0, "torch intra-op threads (0: torch's default)")
    read_timeout_s: float = opt(60.0, "longest time to read the flywheel.sft.v1 snapshot")

    def policy_overrides(self) -> dict[str, Any]:
        extra = json_object(self.policy_config, "policy_config")
        return policy_kind(self.policy_kind).bc_config(get_suite(self.suite).action_types, self.pretrained, self.seed,
                                                       extra, keys=hotkeys())

    def epochs_for(self, kind: str) -> int:
        return self.epochs or policy_kind(kind).bc_epochs

    def lr_for(self, kind: str) -> float:
        return self.lr or policy_kind(kind).bc_lr

    def minibatch_for(self, kind: str) -> int:
        return self.minibatch_size or policy_kind(kind).bc_minibatch_size

    def validate(self) -> "BCConfig":
        if self.demos_per_task < 1 or self.epochs < 0 or self.minibatch_size < 0 or self.lr < 0:
            raise ConfigError("demos_per_task must be >= 1; epochs, minibatch_size and lr >= 0 (0: the kind's default)")
        if not self.train_budget_s >= 0:  # NaN included
            raise ConfigError(f"train_budget_s must be >= 0 (0: every epoch), got {self.train_budget_s}")
        if self.shift_copies < 0 or not 0.0 <= self.shift_frac <= 1.0 or self.adapter_lr_mult <= 0:
            raise ConfigError("shift_copies must be >= 0, shift_frac within [0, 1] and adapter_lr_mult > 0")
        get_suite(self.suite)
        json_object(self.policy_config, "policy_config")  # a bad JSON fails here, not once the policy loads

        check_device(self.device, self.policy_kind, "flywheel bc")
        return self
