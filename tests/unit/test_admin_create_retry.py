"""infra.runtime.admin.create_topics against a fake admin: a request lost in transit is asked for again,
a topic that exists already is no error, a refusal names the topic, and the deadline holds."""

from __future__ import annotations

import time
from concurrent.futures import Future

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import NewTopic

from infra.runtime.admin import create_topics
from infra.runtime.errors import UserError


class FakeAdmin:
    """Answers each create_topics call from a script: one {topic: error code or None} per call."""

    def __init__(self, script):
        self.script, self.calls = list(script), []

    def create_topics(self, new, request_timeout):
        self.calls.append([t.topic for t in new])
        answers = self.script.pop(0) if self.script else {}
        out = {}
        for t in new:
            fut = Future()
            code = answers.get(t.topic)
            if code is None:
                fut.set_result(None)
            else:
                fut.set_exception(KafkaException(KafkaError(code)))
            out[t.topic] = fut
        return out


def _topics(*names):
    return [NewTopic(n, 1, 1) for n in names]


def test_a_request_lost_with_the_bootstrap_broker_is_retried(monkeypatch):
    monkeypatch.setattr(time, "sleep", lambda s: None)
    admin = FakeAdmin([{"a": KafkaError._DESTROY_BROKER, "c": KafkaError._TRANSPORT}, {"c": KafkaError._DESTROY_BROKER}])
    created = create_topics(admin, _topics("a", "b", "c"), time.monotonic() + 60)
    assert sorted(created) == ["a", "b", "c"]
    assert admin.calls == [["a", "b", "c"], ["a", "c"], ["c"]]


def test_a_lost_request_that_had_created_the_topic_counts_as_created(monkeypatch):
    monkeypatch.setattr(time, "sleep", lambda s: None)
    admin = FakeAdmin([{"a": KafkaError._TIMED_OUT}, {"a": KafkaError.TOPIC_ALREADY_EXISTS}])
    assert create_topics(admin, _topics("a", "b"), time.monotonic() + 60) == ["b", "a"]


def test_a_topic_made_meanwhile_is_not_created_by_us_and_not_an_error():
    admin = FakeAdmin([{"a": KafkaError.TOPIC_ALREADY_EXISTS}])
    assert create_topics(admin, _topics("a", "b"), time.monotonic() + 60) == ["b"]


def test_a_refusal_names_the_topic_and_is_not_retried():
    admin = FakeAdmin([{"bad": KafkaError.INVALID_REPLICATION_FACTOR}])
    with pytest.raises(UserError, match="could not create topic bad"):
        create_topics(admin, _topics("ok", "bad"), time.monotonic() + 60)
    assert len(admin.calls) == 1


def test_a_transient_error_past_the_deadline_is_reported():
    admin = FakeAdmin([{"a": KafkaError._DESTROY_BROKER}] * 3)
    with pytest.raises(UserError, match="could not create topic a"):
        create_topics(admin, _topics("a"), time.monotonic() - 1)
    assert len(admin.calls) == 1
