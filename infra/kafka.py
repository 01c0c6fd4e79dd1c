"""confluent-kafka client factories built from Settings.

Delivery guarantee of ``make_producer``: enable.idempotence=true and acks=all; every message
gets a delivery callback through ``DeliveryTracker``, which records failures so the caller
fails loudly (``raise_if_failed``) instead of ignoring them; ``flush_or_raise`` on shutdown.
Consumers from ``make_consumer`` never auto-commit: each caller commits after its side effect.
"""

from __future__ import annotations

import threading
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer

from infra.settings import Settings


class DeliveryError(RuntimeError):
    """A produced message was not acknowledged by the broker."""


def client_config(settings: Settings) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "bootstrap.servers": settings.bootstrap,
        "security.protocol": settings.kafka_security_protocol,
    }
    if settings.kafka_sasl_mechanism:
        cfg["sasl.mechanism"] = settings.kafka_sasl_mechanism
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
        "message.max.bytes": 8 * 1024 * 1024,
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


def make_producer(settings: Settings, **overrides: Any) -> Producer:
    return Producer(producer_config(settings, **overrides))


def make_consumer(settings: Settings, group_id: str, **overrides: Any) -> Consumer:
    return Consumer(consumer_config(settings, group_id, **overrides))


def flush_or_raise(producer: Producer, tracker: DeliveryTracker | None = None, timeout: float = 30.0) -> None:
    """Flush on shutdown; raise if anything is still queued or was not acknowledged."""
    remaining = producer.flush(timeout)
    if remaining:
        raise DeliveryError(f"{remaining} message(s) still queued after {timeout:.0f}s flush")
    if tracker is not None:
        tracker.raise_if_failed()
