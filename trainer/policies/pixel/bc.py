"""The pixel policy's check of behaviour cloning: how often its greedy action is the
demonstrated one (``flywheel bc`` reports it and publishes it as ``bc/train_match``)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from trainer.sft.bc import Examples


def same_decision(policy, got: Any, want: Any, cells: int = 1) -> bool:
    """The same action type and arguments; a pointer within ``cells`` grid cells of the
    demonstrated one (8 px by default: on the same button or field)."""
    a, b = policy.discretize(got), policy.discretize(want)
    if a[0] != b[0] or len(a) != len(b):
        return False
    if len(a) == 3:  # pointer: (type, cell, direction)
        (ra, ca), (rb, cb) = divmod(a[1], policy.grid), divmod(b[1], policy.grid)
        return a[2] == b[2] and abs(ra - rb) <= cells and abs(ca - cb) <= cells
    return a == b


def greedy_match(policy, data: Examples, cells: int = 1) -> dict[str, float]:
    """Per task, the share of steps where the greedy action is the demonstrated one
    (``same_decision``), and ``all`` over every step."""
    hits: dict[str, list[bool]] = defaultdict(list)
    for i in range(0, len(data.actions), 256):
        chosen = policy.decide(data.obs[i:i + 256], data.instructions[i:i + 256], greedy=True)
        for d, want, task in zip(chosen, data.actions[i:i + 256], data.tasks[i:i + 256]):
            hits[task].append(same_decision(policy, d.action, want, cells))
    out = {task: sum(h) / len(h) for task, h in hits.items()}
    out["all"] = sum(sum(h) for h in hits.values()) / max(sum(len(h) for h in hits.values()), 1)
    return out
