"""Dedicated brokers in a temp folder on free ports: restart keeps committed data; in the
three-node cluster, SIGKILLing a broker while producing with acks=all loses no acknowledged
message."""

from __future__ import annotations

import signal
import time
import uuid

import pytest

from infra.runtime.admin import ensure_topics
from infra.kafka.broker import LocalCluster, free_port_block
from infra.runtime.kafka_clients import DeliveryTracker, flush_or_raise, make_consumer, make_producer
from infra.runtime.settings import load_settings
from infra.runtime.topics import TopicSpec, topic_name

SPEC = TopicSpec("acks.v1", "id", "bytes", 6)


def cluster_settings(cluster: LocalCluster, tmp_path, replication: int):
    return load_settings({"data_dir": str(tmp_path), "kafka_bootstrap": cluster.bootstrap,
                          "topic_prefix": f"t{uuid.uuid4().hex[:8]}.", "replication_factor": replication})


def read_values(settings, topic: str, want: int, timeout: float = 60.0) -> list[int]:
    """Every value on ``topic`` from the beginning, with a fresh group, until ``want`` or idle."""
    consumer = make_consumer(settings, f"g{uuid.uuid4().hex[:12]}")
    consumer.subscribe([topic])
    got: list[int] = []
    deadline, idle_since = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is None or msg.error():
            idle_since = idle_since or time.monotonic()
            if len(got) >= want and time.monotonic() - idle_since > 2:
                break
            continue
        idle_since = None
        got.append(int(msg.value()))
    consumer.close()
    return got


@pytest.fixture
def cluster_factory(kafka_libs, tmp_path):
    started: list[LocalCluster] = []

    def make(brokers: int) -> LocalCluster:
        port = free_port_block(2 * brokers)
        cluster = LocalCluster(tmp_path / f"kafka-{len(started)}", kafka_libs, brokers, port, port + 1)
        started.append(cluster)
        cluster.start()
        return cluster

    yield make
    for cluster in started:
        cluster.stop(grace=20)


def test_stop_and_start_keeps_committed_data_and_offsets(cluster_factory, tmp_path):
    cluster = cluster_factory(1)
    s = cluster_settings(cluster, tmp_path, 1)
    ensure_topics(s, [SPEC])
    topic = topic_name(SPEC, s)
    producer, tracker = make_producer(s), DeliveryTracker()
    for i in range(1000):
        producer.produce(topic, key=str(i % 10).encode(), value=str(i).encode(), on_delivery=tracker)
    flush_or_raise(producer, tracker)
    group = f"g{uuid.uuid4().hex[:12]}"
    consumer = make_consumer(s, group)
    consumer.subscribe([topic])
    first = 0
    while first < 300:
        msg = consumer.poll(1.0)
        if msg is not None and not msg.error():
            first += 1
    consumer.commit(asynchronous=False)
    consumer.close()

    assert cluster.stop() == [1]
    assert not cluster.running()
    cluster.start()

    assert sorted(read_values(s, topic, 1000)) == list(range(1000))
    consumer = make_consumer(s, group)  # the committed offsets survived too
    consumer.subscribe([topic])
    rest, deadline = 0, time.monotonic() + 30
    while rest < 700 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            rest += 1
    extra = consumer.poll(2.0)
    consumer.close()
    assert rest == 700 and (extra is None or extra.error())


def test_sigkill_one_of_three_brokers_loses_no_acknowledged_message(cluster_factory, tmp_path):
    n_messages = 20_000
    cluster = cluster_factory(3)
    s = cluster_settings(cluster, tmp_path, 3)
    report = ensure_topics(s, [SPEC])
    assert report.created and not report.drift
    topic = topic_name(SPEC, s)

    acked: set[int] = set()
    failed: list[str] = []

    def on_delivery(err, msg):
        if err is None:
            acked.add(int(msg.value()))
        else:
            failed.append(str(err))

    producer = make_producer(s, **{"linger.ms": 2})
    killed_at = in_flight = None
    for i in range(n_messages):
        while True:
            try:
                producer.produce(topic, key=str(i % 97).encode(), value=str(i).encode(), on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
        if i == n_messages // 2:
            # Mid-way: a quarter is acknowledged, the rest of the first half is in flight.
            deadline = time.monotonic() + 60
            while len(acked) < n_messages // 4 and time.monotonic() < deadline:
                producer.poll(0.05)
            killed_at, in_flight = i, len(producer)
            cluster.kill(2, signal.SIGKILL)
    remaining = producer.flush(180)
    assert killed_at is not None and 2 not in cluster.running()

    read = read_values(s, topic, len(acked), timeout=120)
    lost = acked - set(read)
    print(f"\nthree brokers, acks=all, broker 2 SIGKILLed after {killed_at} produced "
          f"({in_flight} in flight): "
          f"produced={n_messages} acknowledged={len(acked)} failed={len(failed)} unflushed={remaining} "
          f"read_back={len(read)} distinct_read={len(set(read))} acknowledged_lost={len(lost)}")
    assert not lost, f"{len(lost)} acknowledged messages lost, e.g. {sorted(lost)[:5]}"
    assert len(read) == len(set(read)), "the idempotent producer wrote duplicates"
