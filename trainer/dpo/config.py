"""The typed config of `flywheel dpo` (trainer.dpo.train), apart so the CLI need not import torch."""

from __future__ import annotations

import math
from dataclasses import dataclass

from infra.runtime.config import ConfigError, opt
from infra.runtime.policy import policy_kind

PAIR_KINDS = ("error_correction", "post_reflection")


@dataclass
class DPOConfig:
    policy_name: str = opt("pixel-miniwob", "policy to improve: its versions are the reference and the result")
    reference_version: int = opt(-1, "pi_SFT, the frozen reference and the starting weights (-1: the latest published)")
    beta: float = opt(0.1, "DPO beta: how far the policy may move from the reference (the KL penalty's weight)")
    nll_weight: float = opt(0.0, "weight of the chosen side's per-token NLL added to the DPO loss (RPO): keeps the "
                                 "annotator's action likely while the margin grows; 0: plain DPO")
    kinds: list[str] = opt(list(PAIR_KINDS), "pair kinds trained on")
    annotators: list[str] = opt([], "only pairs of these annotators (default: all)")
    epochs: int = opt(10, "passes over the pairs")
    max_pairs: int = opt(0, "train on at most this many pairs, a seeded sample of the usable ones (0: all); "
                            "a pair of the language policy costs seconds per pass on a CPU")
    lr: float = opt(0.0, "Adam learning rate (0: the policy kind's default, pixel 1e-3, lm 1e-6)")
    head_lr_mult: float = opt(1.0, "learning rate of the parts a policy trains from scratch (the language policy's "
                                   "patch adapter and pointer) as a multiple of lr; 1: one rate for all")
    minibatch_size: int = opt(32, "pairs per gradient step")
    micro_batch: int = opt(-1, "pairs per forward/backward pass, gradients accumulated over the minibatch "
                               "(-1: the kind's default, pixel the whole minibatch, lm 2; 0: the whole minibatch)")
    seed: int = opt(0, "seed of the minibatch order")
    run_id: str = opt("", "run id of the metrics on flywheel.metrics.v1 (default: dpo-<policy>-v<version>)")
    torch_threads: int = opt(0, "torch intra-op threads (0: torch's default)")
    device: str = opt("cpu", "torch device of the policy: cpu, or cuda / cuda:N for the language policy")
    read_timeout_s: float = opt(60.0, "longest time to read the flywheel.pairs.v1 snapshot")

    def learning_rate(self, kind: str) -> float:
        return self.lr or policy_kind(kind).dpo_lr

    def passes(self, kind: str) -> int:
        """Pairs per forward/backward pass (0: the whole minibatch)."""
        return policy_kind(kind).dpo_micro_batch if self.micro_batch < 0 else self.micro_batch

    def validate(self) -> "DPOConfig":
        if not (math.isfinite(self.beta) and self.beta > 0):
            raise ConfigError(f"beta must be a finite number > 0, got {self.beta}")
        if not (math.isfinite(self.nll_weight) and self.nll_weight >= 0):
            raise ConfigError(f"nll_weight must be a finite number >= 0 (0: plain DPO), got {self.nll_weight}")
        if self.epochs < 1 or self.minibatch_size < 1:
            raise ConfigError("epochs and minibatch_size must be >= 1")
        if self.head_lr_mult <= 0:
            raise ConfigError(f"head_lr_mult must be > 0, got {self.head_lr_mult}")
        if self.micro_batch < -1:
            raise ConfigError(f"micro_batch must be -1 (the kind's default), 0 (whole minibatch) or > 0, got {self.micro_batch}")
        if self.max_pairs < 0:
            raise ConfigError(f"max_pairs must be >= 0 (0: all), got {self.max_pairs}")
        unknown = [k for k in self.kinds if k not in PAIR_KINDS]
        if unknown or not self.kinds:
            raise ConfigError(f"kinds: choose from {', '.join(PAIR_KINDS)} (got {self.kinds})")
        return self
