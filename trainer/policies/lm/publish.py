"""Publish a language policy's weights as a new version (used by SFT / CT / merge).

A thin call-shape adapter over trainer.core.publish and infra.runtime.versions, which hold the one implementation: the
safetensors bytes of ``state_dict()`` go to the content-addressed blob store first, then a
PolicyVersion (uri, sha256, parent, metrics, config) keyed by policy name goes to the compacted
flywheel.policy.v1, flushed and acknowledged (acks=all) before this returns.
"""

from __future__ import annotations

from confluent_kafka import Producer

from infra.runtime.kafka_clients import DeliveryTracker
from infra.runtime.settings import Settings
from schemas.blobs import BlobStore
from schemas.events import PolicyVersion
from infra.runtime.versions import publish as _publish
from trainer.core.publish import make_version, save_weights, weights_to_bytes

weights_blob = weights_to_bytes


def publish_version(settings: Settings, producer: Producer, tracker: DeliveryTracker, store: BlobStore, policy,
                    parent: int | None, metrics: dict[str, float]) -> PolicyVersion:
    pv = make_version(policy, save_weights(policy, store), parent, metrics)
    _publish(producer, tracker, settings, pv)
    return pv
