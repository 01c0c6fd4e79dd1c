"""A learner's trained ids (infra.runtime.checkpoint.TrainedIds): exactly-once in memory bounded by the staleness window."""

from __future__ import annotations

import pytest

from infra.runtime.checkpoint import TrainedIds


def test_remembers_what_it_trained_and_refuses_a_second_add():
    led = TrainedIds()
    led.add("ep-1", produced_by=3)
    assert "ep-1" in led and "ep-2" not in led
    with pytest.raises(ValueError, match="trained twice"):
        led.add("ep-1", produced_by=3)


def test_prune_forgets_exactly_the_ids_no_copy_of_which_could_still_be_trained():
    led = TrainedIds()
    for v in range(10):
        led.add(f"ep-{v}", produced_by=v)
    forgotten = led.prune(latest=10, max_staleness=4)  # versions 6..10 are still trainable
    assert forgotten == 6
    assert sorted(led.recent) == [f"ep-{v}" for v in range(6, 10)]
    assert led.total == 10  # the count of everything ever trained survives pruning


def test_memory_stays_bounded_over_a_long_run():
    led = TrainedIds()
    for v in range(1000):
        for k in range(32):
            led.add(f"ep-{v}-{k}", produced_by=v)
        led.prune(latest=v + 1, max_staleness=4)
    assert len(led.recent) <= 32 * 5 and led.total == 32000


def test_round_trips_through_the_checkpoint_json():
    led = TrainedIds()
    led.add("a", 1)
    assert TrainedIds.model_validate(led.model_dump(mode="json")) == led
