"""The rollout workers' task group on the real broker: a worker joining or leaving moves only the
partitions that change owner, so the others never give up (and play again) tasks they are running."""

from __future__ import annotations

import time

from infra.runtime.kafka_clients import make_consumer
from infra.runtime.topics import TOPICS, topic_name
from producers.rollout import RolloutConfig, consumer_overrides


class Member:
    def __init__(self, settings, group_id: str, topic: str) -> None:
        self.revoked: list[int] = []
        self.consumer = make_consumer(settings, group_id, **consumer_overrides(RolloutConfig(session_timeout_s=6.0)))
        self.consumer.subscribe([topic], on_revoke=lambda c, ps: self.revoked.extend(p.partition for p in ps))

    def owned(self) -> set[int]:
        return {tp.partition for tp in self.consumer.assignment()}


def poll_until(members: list[Member], done, timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        for m in members:
            m.consumer.poll(0.1)
        if done():
            return
    raise AssertionError(f"the group did not settle in {timeout:.0f}s: {[sorted(m.owned()) for m in members]}")


def test_a_worker_joining_or_leaving_takes_no_partition_the_others_keep(settings, group_id):
    topic = topic_name(TOPICS.tasks, settings)
    every = set(range(TOPICS.tasks.partitions))
    assert len(every) >= 2, "the test needs a partition for each of two workers"
    stays = Member(settings, group_id, topic)
    poll_until([stays], lambda: stays.owned() == every)
    joins = Member(settings, group_id, topic)
    poll_until([stays, joins], lambda: joins.owned() and stays.owned() | joins.owned() == every
               and not stays.owned() & joins.owned())
    kept = stays.owned()
    assert sorted(stays.revoked) == sorted(every - kept)  # only what moved to the newcomer
    stays.revoked.clear()
    joins.consumer.close()  # leaves the group: its partitions come back, none of the others' go
    poll_until([stays], lambda: stays.owned() == every)
    assert stays.revoked == [] and kept <= stays.owned()
    stays.consumer.close()
