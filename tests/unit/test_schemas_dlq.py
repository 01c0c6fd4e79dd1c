"""The dead-letter envelope: stage, error type, message, source position, original bytes."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infra.runtime.dlq import MAX_ORIGINAL_BYTES, dead_letter, original_key, original_value
from schemas.codec import DecodeError, SchemaVersionError, decode, encode
from schemas.events import DeadLetter, EpisodeEvent


def _decode_error(data: bytes) -> DecodeError:
    with pytest.raises(DecodeError) as info:
        decode(data, EpisodeEvent)
    return info.value


def test_decode_failure_envelope():
    bad = b'{"kind": "step", "schema_version": 1, "episode_id": "e"'
    letter = dead_letter("assembler", _decode_error(bad), "flywheel.steps.v1", 3, 1042, b"ep-1", bad)
    assert (letter.stage, letter.source_topic, letter.source_partition, letter.source_offset) == \
        ("assembler", "flywheel.steps.v1", 3, 1042)
    assert letter.error_type == "invalid_json"
    assert "invalid JSON" in letter.message
    assert original_value(letter) == bad and original_key(letter) == b"ep-1"
    assert letter.original_size == len(bad) and not letter.original_truncated
    assert letter.event_id == "flywheel.steps.v1:3:1042:assembler"
    assert decode(encode(letter), DeadLetter) == letter  # the envelope itself is a valid event


def test_schema_version_and_field_errors_keep_their_error_type():
    newer = b'{"kind": "step", "schema_version": 7}'
    err = _decode_error(newer)
    assert isinstance(err, SchemaVersionError)
    letter = dead_letter("sink", err, "t", 0, 0, None, newer)
    assert letter.error_type == "schema_version" and "schema_version" in letter.message
    assert letter.original_key is None and original_key(letter) is None


def test_other_exceptions_carry_class_name_and_message():
    try:
        {}["missing"]
    except KeyError as exc:
        letter = dead_letter("scorer", exc, "flywheel.trajectories.v1", 1, 7, b"k", b"{}")
    assert letter.error_type == "KeyError"
    assert "KeyError" in letter.message and "missing" in letter.message


def test_never_raises_on_odd_inputs():
    letter = dead_letter("", RuntimeError(""), "", None, None, "str-key", "str value")
    assert (letter.stage, letter.source_topic) == ("unknown", "unknown")
    assert (letter.source_partition, letter.source_offset) == (-1, -1)
    assert original_key(letter) == b"str-key" and original_value(letter) == b"str value"
    assert letter.error_type == "RuntimeError" and letter.message
    tombstone = dead_letter("sink", _decode_error(None), "t", 0, 5, b"k", None)
    assert original_value(tombstone) == b"" and tombstone.error_type == "empty"
    long = dead_letter("s" * 1000, ValueError("x" * 100_000), "t" * 1000, 0, 0, None, b"v")
    assert len(long.stage) == 256 and len(long.message) <= 4000


def test_oversize_record_is_truncated_and_flagged():
    big = b"x" * (MAX_ORIGINAL_BYTES + 10)
    letter = dead_letter("sink", ValueError("too big"), "t", 0, 1, b"k", big)
    assert letter.original_truncated and letter.original_size == len(big)
    assert original_value(letter) == big[:MAX_ORIGINAL_BYTES]
    assert len(encode(letter)) < 1024 * 1024  # fits Kafka's default message size


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=300), st.none() | st.binary(max_size=40), st.integers(-1, 2**31), st.integers(-1, 2**62))
def test_original_bytes_are_recoverable(value, key, partition, offset):
    letter = dead_letter("stage", ValueError("bad"), "topic", partition, offset, key, value)
    assert original_value(letter) == value and original_key(letter) == key
    assert letter.original_value == base64.b64encode(value).decode()
    assert decode(encode(letter), DeadLetter) == letter
