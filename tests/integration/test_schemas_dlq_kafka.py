"""send_dead_letter on the real broker: the letter lands on the DLQ topic, keyed by the
original key, and the original bytes come back out."""

from __future__ import annotations

import pytest

from infra.runtime.dlq import dead_letter, original_value, send_dead_letter
from infra.runtime.kafka_clients import DeliveryTracker, flush_or_raise, make_consumer, make_producer
from infra.runtime.topics import TOPICS, topic_name
from schemas.codec import DecodeError, decode
from schemas.events import DeadLetter, EpisodeEvent

pytestmark = pytest.mark.integration


def test_dead_letter_round_trip_through_kafka(settings, group_id):
    bad = b'{"kind": "step", "schema_version": 42}'
    try:
        decode(bad, EpisodeEvent)
    except DecodeError as exc:
        letter = dead_letter("test-stage", exc, topic_name(TOPICS.steps, settings), 2, 99, b"ep-7", bad)
    producer = make_producer(settings)
    tracker = DeliveryTracker()
    send_dead_letter(producer, settings, letter, b"ep-7", on_delivery=tracker)
    flush_or_raise(producer, tracker)

    consumer = make_consumer(settings, group_id)
    consumer.subscribe([topic_name(TOPICS.dlq, settings)])
    try:
        got = []
        for _ in range(60):
            got += [m for m in consumer.consume(10, timeout=0.5) if not m.error()]
            if got:
                break
    finally:
        consumer.close()
    assert len(got) == 1 and got[0].key() == b"ep-7"
    received = decode(got[0].value(), DeadLetter)
    assert received == letter
    assert received.error_type == "schema_version" and original_value(received) == bad
