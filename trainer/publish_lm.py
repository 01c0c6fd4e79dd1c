"""Publish a policy's weights as a new version (used by SFT / CT / merge).

Stand-in until trainer/publish.py (the PPO trainer's publisher) lands; same contract: the
safetensors bytes of ``state_dict()`` go to the content-addressed blob store first, then a
PolicyVersion (uri, sha256, parent, metrics, config) keyed by policy name goes to the compacted
flywheel.policy.v1, flushed and acknowledged (acks=all) before this returns.
"""

from __future__ import annotations

import time

from confluent_kafka import Producer

from infra.kafka import DeliveryTracker, flush_or_raise
from infra.settings import Settings
from infra.topics import TOPICS, topic_name
from schemas.blobs import BlobStore
from schemas.codec import encode
from schemas.events import PolicyVersion


def weights_blob(policy) -> bytes:
    from safetensors.torch import save

    return save({k: v.detach().contiguous().cpu() for k, v in policy.state_dict().items()})


def publish_version(settings: Settings, producer: Producer, tracker: DeliveryTracker, store: BlobStore, policy,
                    parent: int | None, metrics: dict[str, float]) -> PolicyVersion:
    ref = store.put(weights_blob(policy), "application/vnd.safetensors")
    pv = PolicyVersion(policy=policy.name, version=policy.version, kind=policy.kind, uri=ref.uri, sha256=ref.sha256,
                       parent=parent, created_at=time.time(), metrics=metrics, config=policy.config_dict())
    producer.produce(topic_name(TOPICS.policy, settings), key=pv.policy.encode(), value=encode(pv), on_delivery=tracker)
    flush_or_raise(producer, tracker)
    return pv
