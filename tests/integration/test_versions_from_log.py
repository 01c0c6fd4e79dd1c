"""A run's versions outlive the broker they were published on: the sink landed them in ClickHouse,
and versions.history reads them there when the topic cannot be read (merge_curve resuming on a
new broker, `flywheel demo --start-from` a run of an earlier broker)."""

from __future__ import annotations

import threading
import uuid
from dataclasses import asdict

import pytest

from consumers.sink import Sink, SinkConfig
from infra.runtime import versions
from infra.runtime.errors import UserError
from infra.runtime.kafka_clients import DeliveryTracker, make_producer
from infra.runtime.settings import load_settings
from schemas.events import PolicyVersion


def test_a_version_on_no_topic_of_this_broker_is_read_back_from_clickhouse(settings, group_id):
    pv = PolicyVersion(policy="pixel-gone", version=5, kind="pixel", uri="blob://x", sha256="0" * 64, parent=4,
                       created_at=1.0, metrics={"start_from/x": 4.0})
    versions.publish(make_producer(settings), DeliveryTracker(), settings, pv)
    cfg = SinkConfig(group_id=group_id, exit_when_idle_s=1.5, flush_interval_s=0.5, query_port=-1)
    Sink(settings, cfg).run(threading.Event())  # lands it in this data dir's chDB
    # the same data dir on a broker that never had the run's topics
    elsewhere = load_settings({**asdict(settings), "topic_prefix": f"gone{uuid.uuid4().hex[:8]}."})
    found = versions.history(elsewhere, "pixel-gone", [5], timeout_s=2.0)
    assert (found[5].version, found[5].uri, found[5].parent, found[5].metrics) == (5, "blob://x", 4, {"start_from/x": 4.0})
    with pytest.raises(UserError, match=r"version\(s\) \[7\] not found"):
        versions.history(elsewhere, "pixel-gone", [7], timeout_s=2.0)
    with pytest.raises(UserError):  # all versions (no wanted list) is the topic's answer: no silent empty history
        versions.history(elsewhere, "pixel-gone", timeout_s=2.0)
