"""Store a policy's weights, describe them as a PolicyVersion, and publish trainer metrics: the
one home of publishing a version, for every kind and job (PPO, BC, SFT / CT, DPO, merge).

Weights go to the content-addressed blob store as safetensors (their sha256 is the blob's
name); the ``PolicyVersion`` built from them is announced with ``infra.runtime.versions.publish`` only
after that, and ``TrainerMetrics`` go to flywheel.metrics.v1 keyed by run id. Delivery: the
idempotent producer from infra.runtime.kafka_clients (acks=all); ``publish_metrics`` flushes and raises
``DeliveryError`` unless the broker acknowledged the record.
"""

from __future__ import annotations

from safetensors.torch import save as save_safetensors

from infra.runtime.kafka_clients import DeliveryTracker, flush_or_raise
from infra.runtime.policy import policy_kind
from infra.runtime.versions import publish
from infra.runtime.settings import Settings
from infra.runtime.topics import TOPICS, topic_name
from schemas.base import now
from schemas.blobs import BlobStore
from schemas.codec import encode
from schemas.events import BlobRef, PolicyVersion, TrainerMetrics


def weights_to_bytes(policy) -> bytes:
    """safetensors bytes of ``policy.state_dict()`` (tensors copied: shared storage is not allowed)."""
    tensors = {k: v.detach().cpu().contiguous().clone() for k, v in policy.state_dict().items()}
    return save_safetensors(tensors)


def save_weights(policy, store: BlobStore) -> BlobRef:
    return store.put(weights_to_bytes(policy), "application/vnd.safetensors")


def make_version(policy, ref: BlobRef, parent: int | None, metrics: dict[str, float] | None = None) -> PolicyVersion:
    """``policy``'s version, stored at ``ref``; a UserError naming the known kinds when its kind is
    not registered here, since no reader could rebuild it (the schema admits any kind's name)."""
    policy_kind(policy.kind)
    return PolicyVersion(policy=policy.name, version=policy.version, kind=policy.kind, uri=ref.uri,
                         sha256=ref.sha256, parent=parent, created_at=now(),
                         metrics={k: float(v) for k, v in (metrics or {}).items() if v == v},  # drop NaN
                         config=policy.config_dict())


def publish_version(settings: Settings, producer, tracker: DeliveryTracker, store: BlobStore, policy,
                    parent: int | None, metrics: dict[str, float]) -> PolicyVersion:
    """Store ``policy``'s weights, then announce them as its version (flushed and acknowledged)."""
    pv = make_version(policy, save_weights(policy, store), parent, metrics)
    publish(producer, tracker, settings, pv)
    return pv


def publish_metrics(producer, tracker: DeliveryTracker, settings: Settings, m: TrainerMetrics) -> None:
    producer.produce(topic_name(TOPICS.metrics, settings), key=m.run_id.encode(), value=encode(m), on_delivery=tracker)
    flush_or_raise(producer, tracker)
