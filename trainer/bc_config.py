"""The typed config of `flywheel bc` (trainer.bc), apart so the CLI need not import torch."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from infra.config import ConfigError, opt
from producers.suites import get_suite


@dataclass
class BCConfig:
    policy_name: str = opt("pixel-miniwob", "policy name pi_sft is published under (the PPO trainer's)")
    suite: str = opt("default", "task suite: its tasks' demonstrations are used and its action heads built")
    tasks: list[str] = opt([], "only these tasks' demonstrations (default: the suite's)")
    demos_per_task: int = opt(20, "at most this many demonstrations per task (WGE used 10)")
    policy_config: str = opt("", "JSON object merged into the pixel policy's config")
    epochs: int = opt(40, "passes over the demonstration steps")
    lr: float = opt(1e-2, "Adam learning rate (tests/e2e/test_bc_pixel.py: 3e-3 underfits 20 demos in 40 epochs)")
    minibatch_size: int = opt(32, "steps per gradient step")
    seed: int = opt(0, "seed of the initial weights and of the minibatch order")
    torch_threads: int = opt(0, "torch intra-op threads (0: torch's default)")
    read_timeout_s: float = opt(60.0, "longest time to read the flywheel.sft.v1 snapshot")

    def policy_overrides(self) -> dict[str, Any]:
        try:
            extra = json.loads(self.policy_config) if self.policy_config else {}
        except json.JSONDecodeError as exc:
            raise ConfigError(f"policy_config is not JSON: {exc}") from None
        return {"action_types": list(get_suite(self.suite).action_types), "seed": self.seed, **extra}

    def validate(self) -> "BCConfig":
        if self.demos_per_task < 1 or self.epochs < 1 or self.minibatch_size < 1:
            raise ConfigError("demos_per_task, epochs and minibatch_size must be >= 1")
        get_suite(self.suite)
        return self
