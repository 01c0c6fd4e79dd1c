"""Demonstrations held out of a clone, to check it on episodes it did not see
(``python -m benchmarks.bc_holdout``): the last few of each task by episode id."""

from __future__ import annotations


def split(by_task: dict[str, list], held_out: int) -> tuple[list, list]:
    """The last ``held_out`` episodes of each task to test, the rest to train; a task with no
    more than ``held_out`` episodes is refused (nothing would be left to clone)."""
    short = [t for t, eps in by_task.items() if len(eps) <= held_out]
    if short:
        raise SystemExit(f"bc_holdout: {', '.join(short)} have {held_out} or fewer demonstrations: lower --held-out")
    train = [e for eps in by_task.values() for e in eps[:-held_out]]
    test = [e for eps in by_task.values() for e in eps[-held_out:]]
    return train, test
