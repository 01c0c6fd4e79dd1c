"""The checkpointed consume loop on the real broker: crash windows and dead-letter acknowledgement.

- A process SIGKILLed after its flush and before its commit: the restart reads that batch again
  (replayed, never lost) and nothing committed before it (group offsets, and the learner's
  checkpoint file).
- A dead letter the broker refuses (over the DLQ topic's max.message.bytes): the sink stops and
  the offset of the record that caused it is not committed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_INVALID, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from infra.runtime.kafka_clients import DeliveryError, client_config, make_consumer, make_producer
from infra.runtime.topics import TOPICS, topic_name

sys.path.insert(0, str(Path(__file__).parent))
import loop_child  # noqa: E402

N = 40


def produce(settings, topic, values, partition=0):
    producer = make_producer(settings)
    for v in values:
        producer.produce(topic, key=b"k", value=v, partition=partition)
    assert producer.flush(30) == 0


def committed(settings, group, topic, partition=0) -> int:
    consumer = make_consumer(settings, group)
    try:
        return consumer.committed([TopicPartition(topic, partition)], timeout=10)[0].offset
    finally:
        consumer.close()


def read_offsets(path: Path) -> list[int]:
    return [int(x) for x in path.read_text().split()] if path.exists() else []


@pytest.mark.parametrize("mode", ["group", "file"])
def test_sigkill_between_flush_and_commit_replays_and_never_loses(settings, group_id, tmp_path, mode):
    topic = topic_name(TOPICS.sft, settings)
    produce(settings, topic, [f"r-{i}".encode() for i in range(N)])
    first, marker = tmp_path / "first.txt", tmp_path / "flushed"
    ckpt = str(tmp_path / "ckpt.json") if mode == "file" else "-"
    child = subprocess.Popen([sys.executable, loop_child.__file__, settings.bootstrap, settings.topic_prefix,
                              group_id, topic, str(first), str(marker), ckpt])
    try:
        deadline = time.monotonic() + 120
        while not marker.exists() and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marker.exists(), f"the child never reached its second flush (exit {child.poll()})"
        os.kill(child.pid, signal.SIGKILL)  # after flush 2, before its commit
        child.wait(30)
    finally:
        if child.poll() is None:
            child.kill()
    assert read_offsets(first) == list(range(20))  # two flushes of 10; only the first was committed

    second = tmp_path / "second.txt"
    loop_child.run(settings.bootstrap, settings.topic_prefix, group_id, topic, second, None, ckpt,
                   hang_on=0, stop=threading.Event())
    again = read_offsets(second)
    assert again == list(range(10, N))  # the flushed-but-uncommitted batch is read again, nothing before it
    assert sorted(set(read_offsets(first)) | set(again)) == list(range(N))  # nothing lost
    assert committed(settings, group_id, topic) == N
    if mode == "file":
        from infra.runtime.checkpoint import load_checkpoint

        assert load_checkpoint(Path(ckpt), loop_child.State).offsets == {topic: {0: N}}


def test_a_dead_letter_the_broker_refuses_leaves_the_offset_uncommitted(settings, group_id):
    from consumers.sink import Sink, SinkConfig

    dlq_topic = topic_name(TOPICS.dlq, settings)
    admin = AdminClient(client_config(settings))
    resource = ConfigResource(ResourceType.TOPIC, dlq_topic, incremental_configs=[
        ConfigEntry("max.message.bytes", "1024", incremental_operation=AlterConfigOpType.SET)])
    for fut in admin.incremental_alter_configs([resource]).values():
        fut.result(30)
    steps = topic_name(TOPICS.steps, settings)
    produce(settings, steps, [os.urandom(8000)])  # undecodable, and its dead letter is over 1 KiB
    cfg = SinkConfig(group_id=group_id, exit_when_idle_s=1.5, flush_interval_s=0.5, query_port=-1)
    with pytest.raises(DeliveryError, match="not delivered"):
        Sink(settings, cfg).run(threading.Event())
    assert committed(settings, group_id, steps) == OFFSET_INVALID  # the record will be read again
