"""infra.runtime.admin.consumer_lag against a fake admin: only the groups asked for are queried,
and a partition of a committed topic the group never committed on counts in full."""

from __future__ import annotations

from concurrent.futures import Future
from types import SimpleNamespace

from confluent_kafka import TopicPartition

from infra.runtime import admin as admin_mod


def _done(value):
    fut = Future()
    fut.set_result(value)
    return fut


class FakeAdmin:
    def __init__(self, commits):
        self.commits, self.asked = commits, []

    def list_consumer_groups(self, request_timeout):
        return _done(SimpleNamespace(valid=[SimpleNamespace(group_id=g) for g in self.commits]))

    def list_consumer_group_offsets(self, requests, request_timeout):
        group = requests[0].group_id
        self.asked.append(group)
        parts = [TopicPartition(t, p, o) for (t, p), o in self.commits[group].items()]
        return {group: _done(SimpleNamespace(topic_partitions=parts))}

    def list_offsets(self, request, request_timeout):
        latest = "latest" in repr(next(iter(request.values()))).lower()
        return {tp: _done(SimpleNamespace(offset=10 if latest else 0)) for tp in request}


def test_only_the_prefixed_groups_are_asked_and_uncommitted_partitions_count_in_full(monkeypatch):
    fake = FakeAdmin({"run-a.rollout": {("p.tasks", 0): 7}, "run-b.rollout": {("p.tasks", 1): 3}})
    md = SimpleNamespace(topics={"p.tasks": SimpleNamespace(partitions={0: None, 1: None})})
    monkeypatch.setattr(admin_mod, "require_kafka", lambda settings: (fake, md))
    settings = SimpleNamespace(topic_prefix="p.")
    assert admin_mod.consumer_lag(settings, group_prefix="run-a.") == {"run-a.rollout": {"p.tasks": 3 + 10}}
    assert fake.asked == ["run-a.rollout"]
    assert admin_mod.consumer_lag(settings) == {"run-a.rollout": {"p.tasks": 13}, "run-b.rollout": {"p.tasks": 10 + 7}}
