"""Idempotent producer -> broker -> consumer, through the shared fixtures and the catalog."""

from __future__ import annotations

import time

from infra.runtime.kafka_clients import DeliveryTracker, flush_or_raise, make_consumer, make_producer
from infra.runtime.topics import TOPICS, topic_name


def test_idempotent_producer_round_trip_keeps_per_key_order(settings, group_id):
    topic = topic_name(TOPICS.steps, settings)
    producer = make_producer(settings)
    tracker = DeliveryTracker()
    sent = [(f"ep{i % 7}".encode(), f"{i}".encode()) for i in range(500)]
    for key, value in sent:
        producer.produce(topic, value=value, key=key, on_delivery=tracker)
        producer.poll(0)
    flush_or_raise(producer, tracker)
    assert tracker.acked == len(sent)

    consumer = make_consumer(settings, group_id)
    consumer.subscribe([topic])
    got: list[tuple[bytes, bytes, int]] = []
    deadline = time.monotonic() + 30
    while len(got) < len(sent) and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is None or msg.error():
            continue
        got.append((msg.key(), msg.value(), msg.partition()))
    consumer.commit(asynchronous=False)
    consumer.close()

    assert sorted(got, key=lambda g: int(g[1])) and len(got) == len(sent)
    by_key: dict[bytes, list[int]] = {}
    for key, value, _ in got:
        by_key.setdefault(key, []).append(int(value))
    for key, values in by_key.items():
        assert values == sorted(values), f"key {key!r} out of order"
    partitions = {}
    for key, _, p in got:
        partitions.setdefault(key, set()).add(p)
    assert all(len(ps) == 1 for ps in partitions.values()), "a key spread over partitions"
    assert {int(v) for _, v, _ in got} == set(range(len(sent)))


def test_idempotence_is_on_for_the_factory_producer(settings):
    from infra.runtime.kafka_clients import producer_config

    cfg = producer_config(settings)
    assert cfg["enable.idempotence"] is True and cfg["acks"] == "all"


def test_transactions_work_on_the_local_broker(settings, group_id):
    """The transaction state topic is configured for the cluster size (one node included)."""
    import uuid

    from infra.runtime.kafka_clients import producer_config
    from confluent_kafka import Producer

    topic = topic_name(TOPICS.metrics, settings)
    producer = Producer(producer_config(settings, **{"transactional.id": f"tx-{uuid.uuid4().hex[:8]}"}))
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, key=b"r", value=b"aborted")
    producer.abort_transaction(30)
    producer.begin_transaction()
    producer.produce(topic, key=b"r", value=b"committed")
    producer.commit_transaction(30)

    consumer = make_consumer(settings, group_id)  # read_committed
    consumer.subscribe([topic])
    values, deadline = [], time.monotonic() + 30
    while not values and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            values.append(msg.value())
    extra = consumer.poll(1.0)
    consumer.close()
    assert values == [b"committed"] and (extra is None or extra.error())
