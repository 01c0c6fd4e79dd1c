"""The verifier's measures: the threshold for a recall, the confusion table, per held-out task.

A false positive is an episode the page failed and the verifier passes: the reward a policy could
learn to hack. Recall is the share of the page's successes the verifier passes. The threshold is
chosen on the training tasks' calibration episodes and applied unchanged to the held-out tasks.
The AUC needs no threshold: the chance that a success scores above a failure (0.5: the verifier
does not rank a task's episodes at all, whatever threshold it is given).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence


def threshold_for_recall(scores: Sequence[float], labels: Sequence[int], min_recall: float = 0.9) -> float:
    """The highest threshold t whose recall (share of label-1 scores >= t) is at least
    ``min_recall``: the fewest false positives that recall allows. ValueError without a positive."""
    positives = sorted((s for s, y in zip(scores, labels) if y), reverse=True)
    if not positives:
        raise ValueError("no successful episode to choose a threshold on")
    k = max(1, math.ceil(min_recall * len(positives) - 1e-9))
    return float(positives[k - 1])


def confusion(scores: Sequence[float], labels: Sequence[int], threshold: float) -> dict[str, float]:
    """tp, fp, tn, fn, the false-positive rate fp / (fp + tn) and the recall tp / (tp + fn) (NaN
    where undefined: no failure, or no success)."""
    tp = sum(1 for s, y in zip(scores, labels) if y and s >= threshold)
    fp = sum(1 for s, y in zip(scores, labels) if not y and s >= threshold)
    fn = sum(1 for s, y in zip(scores, labels) if y and s < threshold)
    tn = sum(1 for s, y in zip(scores, labels) if not y and s < threshold)
    return {"episodes": tp + fp + tn + fn, "tp": tp, "fp": fp, "tn": tn, "fn": fn,
            "fpr": fp / (fp + tn) if fp + tn else math.nan, "recall": tp / (tp + fn) if tp + fn else math.nan}


def auc(scores: Sequence[float], labels: Sequence[int]) -> float:
    """P(a success's score > a failure's), ties counted half (Mann-Whitney); NaN without both."""
    pos = [s for s, y in zip(scores, labels) if y]
    neg = sorted(s for s, y in zip(scores, labels) if not y)
    if not pos or not neg:
        return math.nan
    wins = sum(bisect.bisect_left(neg, s) + 0.5 * (bisect.bisect_right(neg, s) - bisect.bisect_left(neg, s))
               for s in pos)
    return wins / (len(pos) * len(neg))


def per_task(tasks: Sequence[str], scores: Sequence[float], labels: Sequence[int],
             threshold: float) -> dict[str, dict[str, float]]:
    """``confusion`` and ``auc`` per task, and over all of them under "ALL"."""
    out = {}
    for task in sorted(set(tasks)):
        idx = [i for i, t in enumerate(tasks) if t == task]
        s, y = [scores[i] for i in idx], [labels[i] for i in idx]
        out[task] = {**confusion(s, y, threshold), "auc": auc(s, y)}
    out["ALL"] = {**confusion(scores, labels, threshold), "auc": auc(scores, labels)}
    return out


def render_table(table: dict[str, dict[str, float]]) -> str:
    head = f"{'task':<28} {'episodes':>8} {'tp':>5} {'fp':>5} {'tn':>5} {'fn':>5} {'FPR':>6} {'recall':>6} {'AUC':>6}"
    lines = [head]
    for task, c in table.items():
        lines.append(f"{task:<28} {c['episodes']:>8} {c['tp']:>5} {c['fp']:>5} {c['tn']:>5} {c['fn']:>5} "
                     f"{c['fpr']:>6.3f} {c['recall']:>6.3f} {c.get('auc', math.nan):>6.3f}")
    return "\n".join(lines)
