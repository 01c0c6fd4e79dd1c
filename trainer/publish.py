"""Publish policy versions and trainer metrics.

Weights go to the content-addressed blob store as safetensors (their sha256 is the blob's
name), then a ``PolicyVersion`` goes to the compacted flywheel.policy.v1 keyed by policy name,
and ``TrainerMetrics`` to flywheel.metrics.v1 keyed by run id. Delivery: the idempotent
producer from infra.kafka (acks=all); each publish flushes and raises ``DeliveryError`` unless
the broker acknowledged it, so a version is announced only after its weights are stored, and a
caller never believes an unacknowledged publish.
"""

from __future__ import annotations

from safetensors.torch import save as save_safetensors

from infra.kafka import DeliveryTracker, flush_or_raise, read_to_end
from infra.settings import Settings
from infra.topics import TOPICS, topic_name
from schemas.base import now
from schemas.blobs import BlobStore
from schemas.codec import DecodeError, decode, encode
from schemas.events import BlobRef, PolicyVersion, TrainerMetrics


def weights_to_bytes(policy) -> bytes:
    """safetensors bytes of ``policy.state_dict()`` (tensors copied: shared storage is not allowed)."""
    tensors = {k: v.detach().cpu().contiguous().clone() for k, v in policy.state_dict().items()}
    return save_safetensors(tensors)


def save_weights(policy, store: BlobStore) -> BlobRef:
    return store.put(weights_to_bytes(policy), "application/vnd.safetensors")


def make_version(policy, ref: BlobRef, parent: int | None, metrics: dict[str, float] | None = None) -> PolicyVersion:
    return PolicyVersion(policy=policy.name, version=policy.version, kind=policy.kind, uri=ref.uri,
                         sha256=ref.sha256, parent=parent, created_at=now(),
                         metrics={k: float(v) for k, v in (metrics or {}).items() if v == v},  # drop NaN
                         config=policy.config_dict())


def publish_version(producer, tracker: DeliveryTracker, settings: Settings, pv: PolicyVersion) -> None:
    producer.produce(topic_name(TOPICS.policy, settings), key=pv.policy.encode(), value=encode(pv), on_delivery=tracker)
    flush_or_raise(producer, tracker)


def publish_metrics(producer, tracker: DeliveryTracker, settings: Settings, m: TrainerMetrics) -> None:
    producer.produce(topic_name(TOPICS.metrics, settings), key=m.run_id.encode(), value=encode(m), on_delivery=tracker)
    flush_or_raise(producer, tracker)


def read_versions(settings: Settings, policy_name: str | None = None, timeout_s: float = 15.0) -> list[PolicyVersion]:
    """Every PolicyVersion still on the compacted topic (for ``policy_name`` if given), oldest first.

    Reads from the beginning to the high watermark with a throw-away group and no commits.
    """
    out: list[PolicyVersion] = []
    for msg in read_to_end(settings, topic_name(TOPICS.policy, settings), timeout_s):
        try:
            pv = decode(msg.value(), PolicyVersion)
        except DecodeError:
            continue  # not ours to judge here; the sink dead-letters it
        if policy_name is None or pv.policy == policy_name:
            out.append(pv)
    return out


def latest_version(settings: Settings, policy_name: str, timeout_s: float = 15.0) -> PolicyVersion | None:
    versions = read_versions(settings, policy_name, timeout_s)
    return max(versions, key=lambda v: v.version) if versions else None
