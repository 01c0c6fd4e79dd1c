"""The rollout worker's idle exit (counted from the latest assignment, with a grace for the first)
and its commits (a moving group coordinator is waited out)."""

from __future__ import annotations

import time

from confluent_kafka import KafkaError

from infra.runtime.settings import load_settings
from producers.policy_client import make_client
from producers.rollout import JOIN_GRACE_S, RolloutConfig, RolloutWorker
from tests.fakes.commits import FlakyCommits


def worker(tmp_path, idle_exit_s: float) -> RolloutWorker:
    settings = load_settings({"data_dir": str(tmp_path)})
    return RolloutWorker(RolloutConfig(idle_exit_s=idle_exit_s), settings, make_client("scripted", "scripted"), "w")


def test_before_its_first_assignment_a_worker_waits_the_join_grace_too(tmp_path):
    w = worker(tmp_path, idle_exit_s=3.0)
    w._started_at -= 10.0  # a fresh broker's coordinator took 10 s to load: no assignment yet
    idle, limit = w._idle_s(last_task=time.monotonic() - 10.0)
    assert idle >= 10.0 and limit == 3.0 + JOIN_GRACE_S and idle < limit  # it keeps waiting


def test_after_an_assignment_idle_counts_from_it_or_the_last_task(tmp_path):
    w = worker(tmp_path, idle_exit_s=3.0)
    w._started_at -= 100.0
    w._on_assign(None, [])
    idle, limit = w._idle_s(last_task=time.monotonic() - 50.0)
    assert idle < 1.0 and limit == 3.0  # from the assignment, not the start or the older task
    w._assigned_at -= 20.0
    idle, _ = w._idle_s(last_task=time.monotonic() - 5.0)
    assert 5.0 <= idle < 6.0  # the newer of the two


def test_no_idle_exit_when_it_is_off(tmp_path):
    assert worker(tmp_path, idle_exit_s=0.0)._idle_s(time.monotonic() - 1e6) == (0.0, 0.0)


def test_a_task_commit_waits_out_a_moving_coordinator(tmp_path):
    import asyncio

    w = worker(tmp_path, idle_exit_s=0.0)
    w._consumer = FlakyCommits(KafkaError.COORDINATOR_LOAD_IN_PROGRESS)  # a broker was killed a moment ago
    w.offsets.taken("flywheel.tasks.v1", 0, 11)

    class Msg:
        def topic(self):
            return "flywheel.tasks.v1"

        def partition(self):
            return 0

        def offset(self):
            return 11

    asyncio.run(w._finished(Msg()))
    assert [[(tp.topic, tp.partition, tp.offset) for tp in c] for c in w._consumer.committed] == [[("flywheel.tasks.v1", 0, 12)]]
