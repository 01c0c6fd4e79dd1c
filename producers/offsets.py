"""Which task offsets may be committed: the contiguous prefix of finished ones, per partition.

Episodes finish out of order (N sandboxes run concurrently), but a Kafka commit says "every
offset below this one is done". ``OffsetTracker`` therefore only advances a partition's commit
point over offsets whose episodes were fully acknowledged, so a crash never skips a task.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class _Partition:
    pending: set[int] = field(default_factory=set)  # taken, not yet finished
    finished: set[int] = field(default_factory=set)  # finished above a still-pending offset
    committed: int | None = None  # next offset to consume (Kafka's commit convention)


class OffsetTracker:
    def __init__(self) -> None:
        self._parts: dict[tuple[str, int], _Partition] = {}

    def taken(self, topic: str, partition: int, offset: int) -> None:
        self._parts.setdefault((topic, partition), _Partition()).pending.add(offset)

    def finished(self, topic: str, partition: int, offset: int) -> int | None:
        """Mark ``offset`` done; return the new commit offset of its partition if it advanced."""
        part = self._parts.setdefault((topic, partition), _Partition())
        part.pending.discard(offset)
        part.finished.add(offset)
        floor = min(part.pending) if part.pending else None
        ready = [o for o in part.finished if floor is None or o < floor]
        if not ready:
            return None
        part.finished.difference_update(ready)
        new = max(ready) + 1
        if part.committed is not None and new <= part.committed:
            return None
        part.committed = new
        return new

    def forget(self, topic: str, partition: int) -> None:
        """The partition was revoked: its in-flight offsets belong to the next owner now."""
        self._parts.pop((topic, partition), None)

    def positions(self) -> list[tuple[str, int, int]]:
        """Every partition's commit point so far: re-committed at shutdown in case one was lost."""
        return [(t, p, part.committed) for (t, p), part in self._parts.items() if part.committed is not None]

    def in_flight(self) -> int:
        return sum(len(p.pending) for p in self._parts.values())
