"""streams.continuity.OffsetGuard: a partition's records are admitted in offset order only."""

from __future__ import annotations

from streams.continuity import OffsetGuard, Verdict

P, Q = ("steps", 0), ("steps", 1)


def test_in_order_offsets_are_processed_from_the_committed_offset():
    guard = OffsetGuard()
    assert [guard.admit(P, o, committed=5) for o in (5, 6, 7)] == [Verdict.PROCESS] * 3
    assert guard.expected(P) == 8


def test_a_hole_is_a_jump_and_does_not_move_the_guard():
    guard = OffsetGuard()
    assert guard.admit(P, 5, committed=5) is Verdict.PROCESS
    assert guard.admit(P, 7, committed=5) is Verdict.JUMP  # 6 was never delivered
    assert guard.admit(P, 8, committed=5) is Verdict.JUMP
    assert guard.expected(P) == 6
    assert guard.admit(P, 6, committed=5) is Verdict.PROCESS


def test_the_first_record_after_an_assignment_is_judged_against_the_committed_offset():
    guard = OffsetGuard()
    assert guard.admit(P, 41, committed=6) is Verdict.JUMP  # the restarted worker's first delivery
    assert guard.admit(Q, 3, committed=None) is Verdict.PROCESS  # no commit yet: whatever comes first


def test_a_redelivered_record_is_a_duplicate():
    guard = OffsetGuard()
    for o in (0, 1, 2):
        guard.admit(P, o, committed=0)
    assert guard.admit(P, 1, committed=0) is Verdict.DUPLICATE
    assert guard.admit(P, 3, committed=0) is Verdict.PROCESS


def test_partitions_are_independent_and_forget_starts_over_at_the_committed_offset():
    guard = OffsetGuard()
    guard.admit(P, 10, committed=10)
    guard.admit(Q, 0, committed=0)
    guard.forget([P])
    assert guard.expected(P, committed=4) == 4 and guard.expected(Q) == 1
    assert guard.admit(P, 4, committed=4) is Verdict.PROCESS  # a replay after the rebalance
    guard.forget()
    assert guard.expected(Q) is None


def test_expired_offsets_move_the_guard_to_the_log_start():
    guard = OffsetGuard()
    assert guard.admit(P, 100, committed=20) is Verdict.JUMP
    guard.expired_to(P, 100)
    assert guard.admit(P, 100, committed=20) is Verdict.PROCESS
