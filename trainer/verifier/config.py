"""The typed configs of `flywheel verifier train | eval | serve` (no torch: the CLI reads them at start)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from infra.runtime.config import ConfigError, opt


@dataclass
class VerifierTrainConfig:
    holdout: list[str] = opt([], "task names held out of training and evaluated after it, comma separated (required)")
    out: str = opt("verifier.pt", "where the model goes; its held-out evaluation beside it, <out>.eval.json")
    per_task_label_cap: int = opt(300, "at most this many episodes per task and verdict (balanced: a task's success rate is no cue)")
    side: int = opt(64, "screens are resized to side x side pixels")
    epochs: int = opt(30, "passes over the training episodes (fewer if --minutes runs out)")
    minutes: float = opt(8.0, "training stops after this long whatever --epochs says")
    batch_size: int = opt(64, "episodes per gradient step")
    lr: float = opt(1e-3, "Adam learning rate")
    min_recall: float = opt(0.9, "the threshold is the highest whose recall on the calibration episodes reaches this")
    calibration_fraction: float = opt(0.2, "share of the training tasks' episodes kept out of the fit to choose the threshold")
    seed: int = opt(0, "random seed (sampling, split, initialisation)")

    def validate(self) -> "VerifierTrainConfig":
        """Refuse what the training could only fail on later (or run on silently): a clear error at start."""
        if not self.holdout:
            raise ConfigError("--holdout names the tasks to hold out of training (comma-separated)")
        if min(self.per_task_label_cap, self.epochs, self.batch_size) < 1:
            raise ConfigError("per_task_label_cap, epochs and batch_size must be >= 1")
        if not 16 <= self.side <= 512:
            raise ConfigError(f"side must be 16..512 pixels, got {self.side}")
        for name in ("minutes", "lr"):
            if not (math.isfinite(getattr(self, name)) and getattr(self, name) > 0):
                raise ConfigError(f"{name} must be a finite number > 0, got {getattr(self, name)}")
        if not 0 < self.min_recall <= 1:  # NaN included
            raise ConfigError(f"min_recall must be in (0, 1], got {self.min_recall}")
        if not 0 < self.calibration_fraction < 1:
            raise ConfigError(f"calibration_fraction must be in (0, 1), got {self.calibration_fraction}")
        return self


@dataclass
class VerifierEvalConfig:
    model: str = opt("verifier.pt", "a model `flywheel verifier train` wrote")
    holdout: list[str] = opt([], "tasks to evaluate on, comma separated; none: the ones the model was held out of")

    def validate(self) -> "VerifierEvalConfig":
        if not self.model:
            raise ConfigError("--model names a model `flywheel verifier train` wrote")
        return self


@dataclass
class VerifierServeConfig:
    model: str = opt("verifier.pt", "a model `flywheel verifier train` wrote")
    host: str = opt("127.0.0.1", "address to bind")
    port: int = opt(8765, "port to serve the judge protocol on (POST /score)")

    def validate(self) -> "VerifierServeConfig":
        if not self.model:
            raise ConfigError("--model names a model `flywheel verifier train` wrote")
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"port must be 0..65535 (0: any free one), got {self.port}")
        return self
