"""The rollout worker's default number of sandboxes: the machine's cores, capped by its memory."""

from __future__ import annotations

from producers.capacity import MAX_SANDBOXES, PER_CORE, SANDBOX_MIB, machine_sandboxes, sandboxes_for
from producers.rollout import RolloutConfig


def test_sandboxes_follow_the_cores_until_memory_caps_them():
    assert sandboxes_for(2, 64_000) == 2 * PER_CORE
    assert sandboxes_for(16, 64_000) == 16 * PER_CORE
    assert sandboxes_for(16, 8 * SANDBOX_MIB) == 4  # half the memory is left to the other processes
    assert sandboxes_for(16, 100) == 1  # never none
    assert sandboxes_for(1024, 10**9) == MAX_SANDBOXES


def test_workers_share_the_machine():
    assert sandboxes_for(8, 64_000, workers=2) == 8 * PER_CORE // 2
    assert sandboxes_for(2, 64_000, workers=8) == 1


def test_a_worker_without_a_count_is_sized_to_this_machine():
    assert RolloutConfig().sandboxes == machine_sandboxes() >= 1
    assert RolloutConfig(sandboxes=3).sandboxes == 3
