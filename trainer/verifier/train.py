"""Train and evaluate the verifier: pure steps (balance, fit one epoch, calibrate, evaluate) and
the thin loops of `flywheel verifier train` and `flywheel verifier eval`.

Whole tasks are held out (``--holdout``): the verifier is measured on tasks it never saw. The
threshold is chosen on a calibration share of the training tasks' episodes (recall >= the
target there) and applied to the held-out tasks unchanged, as it would be on a new task.
"""

from __future__ import annotations

import json
import logging
import math
import random
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from infra.clickhouse.client import query_client
from infra.runtime.errors import UserError
from infra.runtime.settings import Settings
from schemas.blobs import BlobNotFound, BlobStore
from trainer.verifier.config import VerifierEvalConfig, VerifierTrainConfig
from trainer.verifier.dataset import EPISODES_SQL, Example, calibration_split, examples_from_rows, split_by_task
from trainer.verifier.features import Batch, featurize, stack
from trainer.verifier.metrics import per_task, render_table, threshold_for_recall
from trainer.verifier.model import VerifierNet, predict, train_step

log = logging.getLogger("flywheel.verifier")


def load_examples(settings: Settings) -> list[Example]:
    """Every trainable episode of the log. Its own fixed read, not `flywheel sql`'s policy: that
    caps a read at 30 s, and a long run's steps take longer to join."""
    client, how = query_client(settings)
    try:
        rows = client.query(EPISODES_SQL).result_rows
    finally:
        client.close()
    log.info("read %d steps from the log (%s)", len(rows), how)
    return examples_from_rows(rows)


def balance(examples: Sequence[Example], cap: int, seed: int) -> list[Example]:
    """At most ``cap`` episodes of each (task, verdict), drawn at random."""
    groups: dict[tuple[str, int | None], list[Example]] = defaultdict(list)
    for e in examples:
        groups[(e.task, e.label)].append(e)
    rng, out = random.Random(seed), []
    for key in sorted(groups, key=str):
        group = groups[key]
        out += rng.sample(group, cap) if len(group) > cap else group
    return out


def featurized(examples: Sequence[Example], store: BlobStore, side: int, buckets: int) -> tuple[Batch, list[Example]]:
    """The examples as one Batch (and the examples kept: one whose screenshot is not stored is
    dropped, with a count in the log)."""
    feats, kept = [], []
    for e in examples:
        try:
            feats.append(featurize(e, store.get, side, buckets))
        except BlobNotFound:
            continue
        kept.append(e)
    if len(kept) < len(examples):
        log.warning("%d of %d episodes dropped: a screenshot not in the blob store", len(examples) - len(kept), len(examples))
    return stack(feats), kept


def labels_of(examples: Sequence[Example]) -> torch.Tensor:
    return torch.tensor([int(e.label or 0) for e in examples])


def fit_epoch(model: VerifierNet, opt: torch.optim.Optimizer, batch: Batch, labels: torch.Tensor,
              batch_size: int, rng: torch.Generator, pos_weight: float = 1.0) -> float:
    """One pass in a random order; the mean loss."""
    order = torch.randperm(len(batch), generator=rng).tolist()
    losses = [train_step(model, opt, batch.take(order[i:i + batch_size]), labels[order[i:i + batch_size]], pos_weight)
              for i in range(0, len(order), batch_size)]
    return sum(losses) / max(len(losses), 1)


def fit(batch: Batch, labels: torch.Tensor, cfg: VerifierTrainConfig,
        clock: Callable[[], float] = time.monotonic) -> VerifierNet:
    torch.manual_seed(cfg.seed)
    model = VerifierNet(side=cfg.side)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    positives = int(labels.sum())
    pos_weight = (len(labels) - positives) / positives if positives else 1.0
    rng, deadline = torch.Generator().manual_seed(cfg.seed), clock() + cfg.minutes * 60
    for epoch in range(cfg.epochs):
        loss = fit_epoch(model, opt, batch, labels, cfg.batch_size, rng, pos_weight)
        log.info("verifier epoch %d: loss %.4f", epoch, loss)
        if clock() > deadline:
            log.info("verifier: --minutes %.1f reached after %d epochs", cfg.minutes, epoch + 1)
            break
    return model


def fit_calibrated(train_set: Sequence[Example], cfg: VerifierTrainConfig,
                   batch_of: Callable[[Sequence[Example]], tuple[Batch, list[Example]]]) -> tuple[VerifierNet, float]:
    """Fit on the training tasks less their calibration share, then choose the threshold on that
    share (the highest whose recall reaches ``cfg.min_recall``). ``batch_of`` turns episodes into a
    Batch and the episodes it kept: featurised from the blob store, or rows of one featurised once."""
    fit_set, cal_set = calibration_split(train_set, cfg.calibration_fraction, cfg.seed)
    fit_batch, fit_kept = batch_of(fit_set)
    log.info("verifier: fitting on %d episodes of %d tasks", len(fit_kept), len({e.task for e in fit_kept}))
    model = fit(fit_batch, labels_of(fit_kept), cfg)
    cal_batch, cal_kept = batch_of(cal_set)
    threshold = threshold_for_recall(predict(model, cal_batch).tolist(), labels_of(cal_kept).tolist(), cfg.min_recall)
    return model, threshold


def save(path: Path, model: VerifierNet, threshold: float, train_tasks: list[str], holdout: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"state_dict": model.state_dict(), "config": model.config, "threshold": threshold,
                "train_tasks": train_tasks, "holdout": holdout}, path)


def load(path: str | Path) -> tuple[VerifierNet, dict]:
    try:
        blob = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise UserError(f"no verifier model at {path}: train one with `flywheel verifier train`") from None
    # the planes its first convolution reads (a model saved before the layout was recorded says none)
    config = {**blob["config"], "image_channels": int(blob["state_dict"]["convs.0.weight"].shape[1])}
    try:
        model = VerifierNet(**config)
    except ValueError as e:
        raise UserError(f"the verifier at {path}: {e}") from None
    model.load_state_dict(blob["state_dict"])
    model.eval()
    return model, blob


def evaluate(model: VerifierNet, blob: dict, examples: Sequence[Example], store: BlobStore) -> dict:
    batch, kept = featurized(examples, store, blob["config"]["side"], blob["config"]["buckets"])
    scores = predict(model, batch).tolist() if kept else []
    table = per_task([e.task for e in kept], scores, [int(e.label or 0) for e in kept], blob["threshold"])
    return {"threshold": blob["threshold"], "holdout": sorted({e.task for e in examples}), "tasks": table}


def train(settings: Settings, cfg: VerifierTrainConfig) -> dict:
    """`flywheel verifier train`: read the log, fit on the training tasks, choose the threshold on
    their calibration episodes, save, and evaluate on the held-out tasks."""
    holdout = cfg.validate().holdout
    examples = balance(load_examples(settings), cfg.per_task_label_cap, cfg.seed)
    train_set, held = split_by_task(examples, holdout)
    if not train_set or not held:
        raise UserError(f"{len(train_set)} training and {len(held)} held-out episodes: the log has "
                        f"tasks {sorted({e.task for e in examples})}")
    store, buckets = BlobStore(settings.blob_root), VerifierNet().config["buckets"]
    model, threshold = fit_calibrated(train_set, cfg, lambda episodes: featurized(episodes, store, cfg.side, buckets))
    train_tasks = sorted({e.task for e in train_set})
    out = Path(cfg.out)
    save(out, model, threshold, train_tasks, holdout)
    report = evaluate(model, {"config": model.config, "threshold": threshold}, held, store)
    report["train_tasks"] = train_tasks
    Path(f"{out}.eval.json").write_text(json.dumps(json_safe(report), indent=1))
    return report


def json_safe(value):
    """NaN (a rate with nothing to divide) as null: JSON has no NaN."""
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    return None if isinstance(value, float) and math.isnan(value) else value


def evaluate_command(settings: Settings, cfg: VerifierEvalConfig) -> dict:
    """`flywheel verifier eval`: the confusion table per held-out task of a trained model."""
    model, blob = load(cfg.model)
    holdout = cfg.holdout or blob["holdout"]
    _, held = split_by_task(load_examples(settings), holdout)
    if not held:
        raise UserError(f"no episode of {', '.join(holdout)} in the log")
    return evaluate(model, blob, held, BlobStore(settings.blob_root))


def render(report: dict) -> str:
    return (f"threshold {report['threshold']:.4f} (chosen on the training tasks for the recall asked)\n"
            + render_table(report["tasks"]))
