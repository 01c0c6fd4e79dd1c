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
from schemas.codec import DecodeError, decode, encode
from schemas.events import DeadLetter

from infra.runtime.kafka_clients import DeliveryTracker, flush_or_raise, make_producer, read_to_end
from infra.runtime.topics import TOPICS, TopicSpec, topic_name

log = logging.getLogger("flywheel.dlq")


MAX_ORIGINAL_BYTES = 512 * 1024  # base64 grows it by 4/3: the letter stays under Kafka's 1 MiB default
_MAX_NAME = 256


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def _as_bytes(data: bytes | str | memoryview | None) -> bytes | None:
    if data is None or isinstance(data, bytes):
        return data
    if isinstance(data, str):
        return data.encode("utf-8", "surrogatepass")
    return bytes(data)


def _name(value: object, default: str) -> str:
    text = str(value) if value not in (None, "") else default
    return text[:_MAX_NAME]


def dead_letter(stage: str, exc: BaseException, source_topic: str, partition: int | None, offset: int | None,
                key: bytes | str | None, value: bytes | str | None) -> DeadLetter:
    """Build the envelope: stage, error type and message, source position, original bytes.

    Never raises (it runs inside error handlers): odd inputs are clamped, an unknown partition
    or offset is -1, and a record over MAX_ORIGINAL_BYTES keeps its first MAX_ORIGINAL_BYTES
    with ``original_truncated`` set and ``original_size`` the size received.
    ``error_type`` is DecodeError's ``error_type`` (invalid_json, schema_version, missing, ...)
    for records that failed to decode, else the exception's class name.
    """
    error_type = getattr(exc, "error_type", None) if isinstance(exc, DecodeError) else None
    if isinstance(exc, DecodeError):
        message = str(exc)
    else:
        message = "".join(traceback.format_exception_only(type(exc), exc)).strip()[:4000]
    key_bytes, value_bytes = _as_bytes(key), _as_bytes(value) or b""
    truncated = len(value_bytes) > MAX_ORIGINAL_BYTES
    return DeadLetter(
        stage=_name(stage, "unknown"), error_type=_name(error_type or type(exc).__name__, "Exception"),
        message=message[:60000] or type(exc).__name__,
        source_topic=_name(source_topic, "unknown"),
        source_partition=partition if isinstance(partition, int) and -1 <= partition < 2**31 else -1,
        source_offset=offset if isinstance(offset, int) and -1 <= offset < 2**63 else -1,
        original_key=_b64(key_bytes[:MAX_ORIGINAL_BYTES] if key_bytes is not None else None),
        original_value=_b64(value_bytes[:MAX_ORIGINAL_BYTES]) or "",
        original_truncated=truncated or (key_bytes is not None and len(key_bytes) > MAX_ORIGINAL_BYTES),
        original_size=len(value_bytes), ts=now(),
    )


def original_value(letter: DeadLetter) -> bytes:
    """The bytes the failing stage received (a prefix if ``letter.original_truncated``)."""
    return base64.b64decode(letter.original_value, validate=True)


def original_key(letter: DeadLetter) -> bytes | None:
    return None if letter.original_key is None else base64.b64decode(letter.original_key, validate=True)


def send_dead_letter(producer, settings, letter: DeadLetter, key: bytes | None, *, on_delivery) -> None:
    """Produce ``letter`` to the DLQ topic, keyed by the original key.

    ``on_delivery`` is required (a ``DeliveryTracker``): the caller must see the broker's
    acknowledgement (``flush_or_raise``) before it commits or checkpoints the source offset.
    """
    log.warning("dead letter from %s at %s[%d]@%d: %s", letter.stage, letter.source_topic,
                letter.source_partition, letter.source_offset, letter.message[:200])
    producer.produce(topic_name(TOPICS.dlq, settings), key=key, value=encode(letter), on_delivery=on_delivery)
    producer.poll(0)


def read_snapshot(settings, spec: TopicSpec, model: type, stage: str, timeout_s: float = 60.0) -> list:
    """Every record of ``spec``'s topic up to its current end, decoded as ``model``; one that does
    not decode is dead-lettered by ``stage`` (acknowledged before this returns) and left out."""
    topic = topic_name(spec, settings)
    producer, tracker, records = make_producer(settings), DeliveryTracker(), []
    for msg in read_to_end(settings, topic, timeout_s):
        try:
            records.append(decode(msg.value(), model))
        except DecodeError as exc:
            send_dead_letter(producer, settings, dead_letter(stage, exc, topic, msg.partition(), msg.offset(),
                                                             msg.key(), msg.value()), msg.key(), on_delivery=tracker)
    flush_or_raise(producer, tracker)
    return records
