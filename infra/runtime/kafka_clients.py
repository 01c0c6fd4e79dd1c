"""confluent-kafka client factories built from Settings.

Delivery guarantee of ``make_producer``: enable.idempotence=true and acks=all; every message
gets a delivery callback through ``DeliveryTracker``, which records failures so the caller
fails loudly (``raise_if_failed``) instead of ignoring them; ``flush_or_raise`` on shutdown.
Consumers from ``make_consumer`` never auto-commit: each caller commits after its side effect.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer

from infra.runtime.settings import Settings
from infra.runtime.topics import MAX_MESSAGE_BYTES
from infra.kafka.tls import MECHANISM
from infra.runtime.probe import check_login

log = logging.getLogger("flywheel.kafka")


class DeliveryError(RuntimeError):
    """A produced message was not acknowledged by the broker."""


def sasl_mechanism(settings: Settings) -> str:
    """One default for every client (librdkafka would pick GSSAPI, Faust PLAIN): SCRAM-SHA-512."""
    return settings.kafka_sasl_mechanism or MECHANISM


def faust_credentials(settings: Settings):
    """The Faust app's ``broker_credentials`` (aiokafka underneath) from the same settings as the
    librdkafka clients: same mechanism default, same user, same CA; None for PLAINTEXT."""
    protocol = settings.kafka_security_protocol
    if protocol == "PLAINTEXT":
        return None
    import ssl

    import faust  # only the streams process pays for the import

    context = None
    if protocol.endswith("SSL"):
        context = ssl.create_default_context(cafile=settings.kafka_ssl_ca or None)
        if settings.kafka_ssl_cert:
            context.load_cert_chain(settings.kafka_ssl_cert, settings.kafka_ssl_key or None)
    if protocol.startswith("SASL"):
        return faust.SASLCredentials(username=settings.kafka_sasl_username, password=settings.kafka_sasl_password,
                                     mechanism=sasl_mechanism(settings), ssl_context=context)
    return faust.SSLCredentials(context)


def client_config(settings: Settings) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "bootstrap.servers": settings.bootstrap,
        "security.protocol": settings.kafka_security_protocol,
    }
    if settings.kafka_security_protocol.startswith("SASL"):
        cfg["sasl.mechanism"] = sasl_mechanism(settings)
        cfg["sasl.username"] = settings.kafka_sasl_username
        cfg["sasl.password"] = settings.kafka_sasl_password
    if settings.kafka_ssl_ca:
        cfg["ssl.ca.location"] = settings.kafka_ssl_ca
    if settings.kafka_ssl_cert:
        cfg["ssl.certificate.location"] = settings.kafka_ssl_cert
    if settings.kafka_ssl_key:
        cfg["ssl.key.location"] = settings.kafka_ssl_key
    return cfg


def producer_config(settings: Settings, **overrides: Any) -> dict[str, Any]:
    cfg = client_config(settings)
    cfg.update({
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 5,
        "compression.type": "lz4",
        "message.max.bytes": MAX_MESSAGE_BYTES,
    })
    cfg.update(overrides)
    return cfg


def consumer_config(settings: Settings, group_id: str, **overrides: Any) -> dict[str, Any]:
    cfg = client_config(settings)
    cfg.update({
        "group.id": group_id,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "isolation.level": "read_committed",
        "fetch.max.bytes": 64 * 1024 * 1024,
        "max.partition.fetch.bytes": 16 * 1024 * 1024,
    })
    cfg.update(overrides)
    return cfg


class DeliveryTracker:
    """Delivery callback that counts acknowledgements and keeps every failure."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.acked = 0
        self.failures: list[tuple[bytes | None, KafkaError]] = []

    def __call__(self, err: KafkaError | None, msg: Any) -> None:
        with self._lock:
            if err is not None:
                self.failures.append((msg.key() if msg is not None else None, err))
            else:
                self.acked += 1

    def raise_if_failed(self) -> None:
        with self._lock:
            if self.failures:
                key, err = self.failures[0]
                raise DeliveryError(f"{len(self.failures)} message(s) not delivered; first key={key!r}: {err}")


_LOGINS_ACCEPTED: set[tuple[str, str, str, str]] = set()


def _check_login_once(settings: Settings) -> None:
    """A refused SASL login ends the process in one clear line (UserError) before a client is made
    that would retry it forever; checked once per process and credentials."""
    if not settings.kafka_security_protocol.startswith("SASL"):
        return
    key = (settings.bootstrap, sasl_mechanism(settings), settings.kafka_sasl_username, settings.kafka_sasl_password)
    if key not in _LOGINS_ACCEPTED:

        check_login(settings)
        _LOGINS_ACCEPTED.add(key)


def make_producer(settings: Settings, **overrides: Any) -> Producer:
    _check_login_once(settings)
    return Producer(producer_config(settings, **overrides))


def make_consumer(settings: Settings, group_id: str, **overrides: Any) -> Consumer:
    _check_login_once(settings)
    return Consumer(consumer_config(settings, group_id, **overrides))


def flush_or_raise(producer: Producer, tracker: DeliveryTracker | None = None, timeout: float = 30.0) -> None:
    """Flush on shutdown; raise if anything is still queued or was not acknowledged."""
    remaining = producer.flush(timeout)
    if remaining:
        raise DeliveryError(f"{remaining} message(s) still queued after {timeout:.0f}s flush")
    if tracker is not None:
        tracker.raise_if_failed()


# errors that pass: a topic just created that one broker does not know yet, a partition whose
# leader is moving, a broker that was killed (its handle destroyed, its socket cut)
_TRANSIENT = {KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.LEADER_NOT_AVAILABLE, KafkaError.NOT_LEADER_FOR_PARTITION,
              KafkaError._DESTROY_BROKER, KafkaError._TRANSPORT}


def _transient(err) -> bool:
    return isinstance(err, KafkaError) and (err.retriable() or err.code() in _TRANSIENT)


# a group coordinator moving or loading its offsets (a broker killed, a leader elected): the
# same commit goes through a moment later; a lost assignment (ILLEGAL_GENERATION, ...) is not here
_COORDINATOR_MOVING = {KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.NOT_COORDINATOR,
                       KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError.REQUEST_TIMED_OUT,
                       KafkaError._TRANSPORT, KafkaError._TIMED_OUT}


def coordinator_moving(exc: BaseException) -> bool:
    """Whether a failed commit says the group's coordinator is moving (``_COORDINATOR_MOVING``):
    the same commit goes through a moment later."""
    err = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    return isinstance(err, KafkaError) and err.code() in _COORDINATOR_MOVING


def commit_offsets(consumer: Consumer, offsets: list, timeout_s: float = 60.0, pause_s: float = 0.5) -> None:
    """Commit ``offsets`` (TopicPartitions) synchronously, retrying while the group's coordinator
    moves (``coordinator_moving``) for up to ``timeout_s``; any other error, or one that outlasts
    it, raises. Committing the same offsets twice is harmless."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            consumer.commit(offsets=offsets, asynchronous=False)
            return
        except KafkaException as exc:
            if not coordinator_moving(exc) or time.monotonic() > deadline:
                raise
            log.warning("commit failed while the group coordinator moves (%s); retrying", exc)
            time.sleep(pause_s)


async def commit_offsets_async(consumer: Consumer, offsets: list, stop: asyncio.Event, timeout_s: float = 60.0,
                               pause_s: float = 0.5) -> None:
    """``commit_offsets`` for an event loop: each try in a worker thread, the pauses between them
    on the loop, so a coordinator that takes its time holds no thread of the loop's shared pool;
    the retries end at ``timeout_s`` or once ``stop`` is set (the caller is going away and commits
    its positions at the end), raising the last error."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            await asyncio.to_thread(consumer.commit, offsets=offsets, asynchronous=False)
            return
        except KafkaException as exc:
            if not coordinator_moving(exc) or time.monotonic() > deadline or stop.is_set():
                raise
            log.warning("commit failed while the group coordinator moves (%s); retrying", exc)
            await asyncio.sleep(pause_s)


def high_watermarks(consumer: Consumer, topic: str, timeout_s: float = 15.0) -> dict[int, int]:
    """partition -> high watermark. Transient errors (a topic created a moment ago that a broker
    does not know yet, a leader moving after a broker was killed) are retried until ``timeout_s``."""
    import time

    from confluent_kafka import KafkaException, TopicPartition

    deadline = time.monotonic() + timeout_s
    while True:  # on several brokers, one may not know a just-created topic yet
        try:
            meta = consumer.list_topics(topic, timeout=timeout_s).topics.get(topic)
            err = meta.error if meta is not None else KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)
        except KafkaException as exc:
            meta, err = None, exc.args[0] if exc.args else None
        if err is None:
            break
        if not _transient(err) or time.monotonic() > deadline:
            raise KafkaException(err)
        time.sleep(0.2)
    ends: dict[int, int] = {}
    for p in sorted(meta.partitions):
        while True:
            try:
                ends[p] = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s)[1]
                break
            except KafkaException as exc:
                if not _transient(exc.args[0] if exc.args else None) or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    return ends


def read_to_end(settings: Settings, topic: str, timeout_s: float = 15.0):
    """Yield every record of ``topic`` from the beginning up to its current end (a compacted
    topic's latest values), with a throw-away group that never commits."""
    import time
    import uuid

    from confluent_kafka import OFFSET_BEGINNING, TopicPartition

    consumer = make_consumer(settings, f"flywheel-reader-{uuid.uuid4().hex[:12]}")
    try:
        ends = high_watermarks(consumer, topic, timeout_s)
        todo = {p for p, high in ends.items() if high > 0}
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in todo])
        deadline = time.monotonic() + timeout_s
        while todo and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            if msg.offset() + 1 >= ends[msg.partition()]:
                todo.discard(msg.partition())
            yield msg
        if todo:
            raise TimeoutError(f"timed out after {timeout_s:.0f}s reading {topic} (partitions {sorted(todo)} unread)")
    finally:
        consumer.close()
