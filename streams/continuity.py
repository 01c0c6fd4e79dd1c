"""A partition's records in offset order, or not at all: the guard between Faust's fetcher and
the stages.

Why: measured in tests/integration/test_streams_app.py's SIGKILL test (about 1 run in 4), right
after a restart Faust's fetch loop handed the assembler a partition's records 216..272 and then
389..524: 273..388 never reached the stage (a fetched batch from before the post-recovery seek
raced the re-fetch), and Faust's consumer took the jump for a legitimate gap (the holes that
compaction or transaction markers leave), so it committed past it: those steps were lost for
good. In another run the same hole was not recorded as a gap and the partition stalled behind it.

The stage topics (steps, trajectories, scored) are neither compacted nor transactional, so a jump
in their offsets always means records that were not delivered. Two parts, both in streams.app:
- the consumer's gap filling is off for these topics (``gapless_topics``): a hole is never
  committed over;
- every stage passes each batch through ``OffsetGuard.admit``: the next offset of a partition is
  processed; a lower one was processed already in this assignment (a re-delivery: dropped); a
  higher one is a jump: the worker restarts itself at once (``exec``, same pid) before anything
  past the hole is acked, and the new worker replays from the committed offset. (Seeking the
  partition back inside the running worker was tried first: the fetch loop's own read offset
  dropped the re-fetched records and the worker stalled.) Offsets below the partition's log
  start have expired: the guard moves on to the log start instead.

The guard forgets every partition when partitions are assigned (Faust then seeks them to their
committed offsets, which is where the guard starts again).
"""

from __future__ import annotations

from enum import Enum
from typing import Hashable


class Verdict(str, Enum):
    PROCESS = "process"  # the partition's next record
    DUPLICATE = "duplicate"  # processed already since the partition was assigned
    JUMP = "jump"  # records before it were not delivered: leave it unacked and rewind


class OffsetGuard:
    """The next offset each partition should deliver (pure bookkeeping; no Kafka here)."""

    def __init__(self) -> None:
        self._next: dict[Hashable, int] = {}

    def admit(self, tp: Hashable, offset: int, committed: int | None) -> Verdict:
        """Judge one record. ``committed`` (the group's committed offset, or None if it has none)
        is where a partition the guard has not seen since its assignment starts."""
        want = self._next.get(tp, committed)
        if want is None or offset == want:
            self._next[tp] = offset + 1
            return Verdict.PROCESS
        return Verdict.DUPLICATE if offset < want else Verdict.JUMP

    def expected(self, tp: Hashable, committed: int | None = None) -> int | None:
        """The offset the partition should deliver next."""
        return self._next.get(tp, committed)

    def expired_to(self, tp: Hashable, log_start: int) -> None:
        """Records before ``log_start`` were deleted by retention: start there."""
        self._next[tp] = log_start

    def forget(self, tps=None) -> None:
        """Start over for these partitions (all if None): after a rebalance Faust seeks them to
        their committed offsets."""
        if tps is None:
            self._next.clear()
        for tp in tps or ():
            self._next.pop(tp, None)
