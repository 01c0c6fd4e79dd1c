"""Topic creation from the catalog, drift detection (never silent), and consumer-group lag."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from infra.runtime.admin import consumer_lag, delete_topics, desired_config, ensure_topics
from app.cli import main as flywheel
from infra.runtime.kafka_clients import DeliveryTracker, client_config, flush_or_raise, make_consumer, make_producer
from infra.runtime.settings import load_settings
from infra.runtime.topics import TOPICS, topic_name


@pytest.fixture
def bare_settings(kafka_bootstrap, tmp_path):
    """Settings with a fresh prefix and NO topics created yet."""
    s = load_settings({"data_dir": str(tmp_path), "kafka_bootstrap": kafka_bootstrap,
                       "topic_prefix": f"d{uuid.uuid4().hex[:8]}."})
    yield s
    delete_topics(s, [topic_name(spec, s) for spec in TOPICS.all()])


def test_second_run_creates_nothing_and_reports_no_drift(settings):
    report = ensure_topics(settings)
    assert report.created == [] and report.drift == []
    assert sorted(report.ok) == sorted(topic_name(s, settings) for s in TOPICS.all())


def test_drift_in_partitions_and_config_is_reported_and_only_config_is_fixed(bare_settings, capsys):
    s = bare_settings
    steps = topic_name(TOPICS.steps, s)
    admin = AdminClient(client_config(s))
    config = {**desired_config(TOPICS.steps, s), "retention.ms": "3600000"}
    wrong = NewTopic(steps, TOPICS.steps.partitions + 2, 1, config=config)
    admin.create_topics([wrong])[steps].result(timeout=30)

    report = ensure_topics(s)
    assert steps not in report.created and len(report.created) == len(TOPICS.all()) - 1
    drift = {d.what: d for d in report.drift}
    assert set(drift) == {"partitions", "retention.ms"}, report.lines()
    assert drift["partitions"].actual == str(TOPICS.steps.partitions + 2)

    args = ["topics", "--kafka-bootstrap", s.bootstrap, "--topic-prefix", s.topic_prefix]
    assert flywheel(args) == 1  # drift fails the command
    out = capsys.readouterr().out.splitlines()
    drift_lines = [line for line in out if line.startswith("drift:")]
    assert len(drift_lines) == 2 and all(steps in line for line in drift_lines)

    assert flywheel(args + ["--fix-config"]) == 1  # partitions are never changed
    out = capsys.readouterr().out
    assert f"fixed {steps}: retention.ms" in out
    after = ensure_topics(s)
    assert [d.what for d in after.drift] == ["partitions"]


def _read_and_commit(consumer, n: int) -> int:
    """Read up to ``n`` messages, committing each; close the consumer; -> how many were read."""
    read, deadline = 0, time.monotonic() + 30
    while read < n and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            read += 1
            consumer.commit(message=msg, asynchronous=False)
    consumer.close()
    return read


def test_consumer_lag_counts_uncommitted_messages(settings, group_id):
    topic = topic_name(TOPICS.tasks, settings)
    producer, tracker = make_producer(settings), DeliveryTracker()
    for i in range(10):
        producer.produce(topic, key=b"k", value=str(i).encode(), on_delivery=tracker)
    flush_or_raise(producer, tracker)

    consumer = make_consumer(settings, group_id)
    consumer.subscribe([topic])
    assert _read_and_commit(consumer, 4) == 4
    assert consumer_lag(settings)[group_id] == {topic: 6}


def test_consumer_lag_counts_a_partition_the_group_never_committed_on(settings, group_id):
    from confluent_kafka import TopicPartition

    topic = topic_name(TOPICS.tasks, settings)  # 4 partitions
    producer, tracker = make_producer(settings), DeliveryTracker()
    for i in range(5):
        producer.produce(topic, value=str(i).encode(), partition=0, on_delivery=tracker)
    for i in range(3):
        producer.produce(topic, value=str(i).encode(), partition=2, on_delivery=tracker)
    flush_or_raise(producer, tracker)

    consumer = make_consumer(settings, group_id)
    consumer.assign([TopicPartition(topic, 0, 0)])  # the group reads and commits on partition 0 only
    assert _read_and_commit(consumer, 2) == 2
    assert consumer_lag(settings)[group_id] == {topic: 3 + 3}  # 3 left on partition 0, all 3 of partition 2
