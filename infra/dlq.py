"""The one helper every stage uses to send a failed record to flywheel.dlq.v1.

Delivery: the dead letter is produced with the idempotent producer of the caller and keyed by
the original key; the caller commits the source offset only after the dead letter was handed
to the producer (and flushes before committing where it commits synchronously).
"""

from __future__ import annotations

import base64
import logging
import traceback

from schemas.base import now
from schemas.codec import DecodeError, encode
from schemas.events import DeadLetter

from infra.topics import TOPICS, topic_name

log = logging.getLogger("flywheel.dlq")


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def dead_letter(stage: str, exc: BaseException, source_topic: str, partition: int, offset: int,
                key: bytes | None, value: bytes | None) -> DeadLetter:
    """Build the envelope: stage, error type and message, source position, original bytes."""
    error_type = getattr(exc, "error_type", None) if isinstance(exc, DecodeError) else None
    message = str(exc) or type(exc).__name__
    if not isinstance(exc, DecodeError):
        tb = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        message = tb[:4000]
    return DeadLetter(
        stage=stage, error_type=error_type or type(exc).__name__, message=message[:60000],
        source_topic=source_topic, source_partition=partition, source_offset=offset,
        original_key=_b64(key), original_value=_b64(value) or "", ts=now(),
    )


def send_dead_letter(producer, settings, letter: DeadLetter, key: bytes | None, on_delivery=None) -> None:
    """Produce ``letter`` to the DLQ topic, keyed by the original key."""
    log.warning("dead letter from %s at %s[%d]@%d: %s", letter.stage, letter.source_topic,
                letter.source_partition, letter.source_offset, letter.message[:200])
    kwargs = {"on_delivery": on_delivery} if on_delivery else {}
    producer.produce(topic_name(TOPICS.dlq, settings), key=key, value=encode(letter), **kwargs)
    producer.poll(0)
