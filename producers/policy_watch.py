"""Hot reload: follow flywheel.policy.v1 (compacted, read from the beginning) and hand newer
versions of the configured policy to the PolicyClient between steps.

Delivery: a plain assigned consumer with no commits (the topic is compacted; every start reads it
from the beginning). A version is adopted only if its weights blob exists and hashes to the
announced sha256; a bad announcement is logged, counted and dead-lettered, and the worker keeps
its current policy. Episodes never stop: the client swaps its weights between batches.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import uuid
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, TopicPartition

from infra.dlq import dead_letter, send_dead_letter
from infra.errors import UserError
from infra.kafka import make_consumer
from infra.topics import TOPICS, topic_name
from producers.policy_client import PolicyClient
from schemas.blobs import BlobNotFound, BlobStore, sha256_hex
from schemas.codec import DecodeError, decode
from schemas.events import PolicyVersion

log = logging.getLogger("flywheel.policy_watch")


def newer(pv: PolicyVersion, client: PolicyClient) -> bool:
    return pv.policy == client.name and pv.version > client.version


def verify(pv: PolicyVersion, blobs: BlobStore) -> None:
    """Raise unless the weights blob exists and hashes to the announced sha256."""
    try:
        data = blobs.get(pv.sha256)
    except BlobNotFound:
        raise ValueError(f"weights of {pv.policy} v{pv.version} are not in the blob store ({pv.uri})") from None
    actual = sha256_hex(data)
    if actual != pv.sha256:
        raise ValueError(f"weights of {pv.policy} v{pv.version} hash to {actual}, announced {pv.sha256}")


class PolicyWatcher:
    def __init__(self, settings: Any, client: PolicyClient, blobs: BlobStore, producer: Any = None) -> None:
        self.settings, self.client, self.blobs, self.producer = settings, client, blobs, producer
        self.topic = topic_name(TOPICS.policy, settings)
        self.reloads = 0
        self.failures = 0
        self.latest_seen: int | None = None
        self._consumer = make_consumer(settings, f"flywheel-policy-watch-{uuid.uuid4().hex[:12]}",
                                       **{"enable.partition.eof": True})
        try:
            parts = self._consumer.list_topics(self.topic, timeout=10).topics[self.topic].partitions or {0: None}
        except KafkaException as exc:
            self._consumer.close()
            raise UserError(f"cannot read {self.topic} from Kafka at {settings.bootstrap}: {exc} "
                            "(is the broker up? `flywheel up`)") from None
        self._consumer.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in parts])
        self._lock = threading.Lock()
        self._closed = False

    def _poll(self, timeout: float) -> Any:
        with self._lock:
            return None if self._closed else self._consumer.poll(timeout)

    async def catch_up(self, timeout_s: float = 15.0) -> None:
        """Read the topic up to its end (the latest version per policy) before the first episode."""
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout_s
        while loop.time() < end:
            msg = await asyncio.to_thread(self._poll, 0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:  # caught up
                    return
                log.warning("policy topic: %s", msg.error())
                continue
            await self._handle(msg)
        log.warning("policy topic not read to its end within %.0fs; carrying on", timeout_s)

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            msg = await asyncio.to_thread(self._poll, 0.5)
            if msg is None or msg.error():
                continue
            await self._handle(msg)

    async def _handle(self, msg: Any) -> None:
        if msg.value() is None:
            return  # a tombstone: nothing to load
        try:
            pv = decode(msg.value(), PolicyVersion)
        except DecodeError as exc:
            self._dead_letter(msg, exc)
            return
        if pv.policy != self.client.name:
            return
        self.latest_seen = max(self.latest_seen or 0, pv.version)
        if not newer(pv, self.client):
            return
        try:
            await asyncio.to_thread(verify, pv, self.blobs)
            await self.client.load_version(pv, self.blobs)
        except Exception as exc:  # noqa: BLE001 - keep the current policy, say why loudly
            self.failures += 1
            log.error("not reloading %s v%d: %s", pv.policy, pv.version, exc)
            self._dead_letter(msg, exc)
            return
        self.reloads += 1
        log.info("policy %s now at version %d (reload %d)", pv.policy, pv.version, self.reloads)

    def _dead_letter(self, msg: Any, exc: BaseException) -> None:
        if self.producer is None:
            return
        letter = dead_letter("rollout.policy_watch", exc, msg.topic(), msg.partition(), msg.offset(),
                             msg.key(), msg.value())
        send_dead_letter(self.producer, self.settings, letter, msg.key())

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._consumer.close()
