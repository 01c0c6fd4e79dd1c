"""One version counter per policy name, whichever trainer publishes."""

from __future__ import annotations

from infra.runtime import versions
from infra.runtime.kafka_clients import DeliveryTracker, make_producer
from schemas.events import PolicyVersion


def test_next_version_is_past_both_our_own_and_anyone_elses_latest(settings):
    assert versions.next_version(settings, "shared", 0) == 1  # nothing published yet
    pv = PolicyVersion(policy="shared", version=5, kind="pixel", uri="blob://x", sha256="0" * 64, parent=4,
                       created_at=1.0)
    versions.publish(make_producer(settings), DeliveryTracker(), settings, pv)  # e.g. an SFT run
    assert versions.next_version(settings, "shared", 2) == 6  # a PPO trainer at v2 does not reuse 3..5
    assert versions.next_version(settings, "shared", 9) == 10
