"""Does the verifier transfer to a task it never saw? Leave one task out, for every task of the log.

Per fold: train on every other task (balanced, the calibration share kept out, as `flywheel
verifier train` does), choose the threshold for the recall asked on the calibration episodes, and
score the held-out task: its AUC (0.5: no ranking at all), FPR and recall. The log is read and
featurised once. Read it while no run holds the log's chDB, or with the run's sink up.

    python -m benchmarks.verifier_loo --minutes 1 --out var/verifier/loo.json
"""

from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import replace
from pathlib import Path

from infra.runtime.settings import Settings
from schemas.blobs import BlobStore
from trainer.verifier.config import VerifierTrainConfig
from trainer.verifier.dataset import split_by_task
from trainer.verifier.metrics import per_task
from trainer.verifier.model import VerifierNet, predict
from trainer.verifier.train import balance, featurized, fit_calibrated, json_safe, labels_of, load_examples


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=1.0, help="training time per fold (or 30 epochs)")
    ap.add_argument("--cap", type=int, default=300, help="episodes per task and verdict")
    ap.add_argument("--min-recall", type=float, default=0.9)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="", help="where the per-task table goes (JSON)")
    args = ap.parse_args()
    settings = Settings()
    examples = balance(load_examples(settings), args.cap, args.seed)
    defaults = VerifierTrainConfig(holdout=["-"], minutes=args.minutes, min_recall=args.min_recall, seed=args.seed)
    batch, kept = featurized(examples, BlobStore(settings.blob_root), defaults.side, VerifierNet().config["buckets"])
    row = {e.episode_id: i for i, e in enumerate(kept)}

    def rows_of(episodes):  # every episode here is featurised already
        return batch.take([row[e.episode_id] for e in episodes]), list(episodes)

    tasks = sorted({e.task for e in kept})
    table = {}
    for task in tasks:
        train, held = split_by_task(kept, [task])
        model, threshold = fit_calibrated(train, replace(defaults, holdout=[task]), rows_of)
        scores = predict(model, rows_of(held)[0]).tolist()
        table[task] = {**per_task([task] * len(held), scores, labels_of(held).tolist(), threshold)[task],
                       "threshold": threshold}
        c = table[task]
        print(f"{task:<28} episodes {c['episodes']:>5}  AUC {c['auc']:.3f}  FPR {c['fpr']:.3f}  "
              f"recall {c['recall']:.3f}  (threshold {threshold:.3f})", flush=True)
    means = {k: statistics.mean(table[t][k] for t in tasks) for k in ("auc", "fpr", "recall")}
    print(f"{'mean over ' + str(len(tasks)) + ' tasks':<28} AUC {means['auc']:.3f}  FPR {means['fpr']:.3f}  "
          f"recall {means['recall']:.3f}")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(json_safe({"tasks": table, "mean": means, "args": vars(args)}), indent=1))


if __name__ == "__main__":
    main()
