"""The typed configs of `flywheel verifier train | eval | serve` (no torch: the CLI reads them at start)."""

from __future__ import annotations

from dataclasses import dataclass

from infra.runtime.config import opt


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


@dataclass
class VerifierEvalConfig:
    model: str = opt("verifier.pt", "a model `flywheel verifier train` wrote")
    holdout: list[str] = opt([], "tasks to evaluate on, comma separated; none: the ones the model was held out of")


@dataclass
class VerifierServeConfig:
    model: str = opt("verifier.pt", "a model `flywheel verifier train` wrote")
    host: str = opt("127.0.0.1", "address to bind")
    port: int = opt(8765, "port to serve the judge protocol on (POST /score)")
