"""orjson serialization and strict decoding with precise errors.

``encode(event) -> bytes`` and ``decode(data, EventType) -> event``. ``decode`` raises only
``DecodeError`` (field, value, reason), never anything else, so a stage can send the record to
the dead-letter topic and keep going.

Why pydantic v2: one declaration gives strict validation with a precise location for every
error, discriminated unions (an episode's events share one topic), JSON Schema export for
outside consumers, and a Rust core fast enough to validate on every hop. Decoding takes the
fast path (pydantic's own JSON parser validates the bytes in one pass, ~2.5x faster than
orjson.loads + validate_python); only a record that fails is parsed again with orjson to name
the failing field and reason precisely, so the slow path costs nothing on valid traffic.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, TypeVar

import orjson
from pydantic import BaseModel, TypeAdapter, ValidationError

from schemas.base import SUPPORTED_SCHEMA_VERSIONS

T = TypeVar("T")
DISCRIMINATORS = ("kind", "type")  # the tag fields of our discriminated unions


class DecodeError(ValueError):
    """A record that is not a valid event: which field, what value, why."""

    def __init__(self, field: str, value: Any, reason: str, error_type: str = "invalid") -> None:
        self.field = field
        self.value = value
        self.reason = reason
        self.error_type = error_type
        try:
            shown = repr(value)
        except Exception:  # pragma: no cover - a value whose repr fails
            shown = f"<{type(value).__name__}>"
        if len(shown) > 120:
            shown = shown[:117] + "..."
        super().__init__(f"{field or '<record>'}: {reason} (value {shown})")


class SchemaVersionError(DecodeError):
    """The record's schema_version is not one this build understands."""


@lru_cache(maxsize=None)
def _adapter(tp: Any) -> TypeAdapter:
    return TypeAdapter(tp)


def to_dict(event: BaseModel) -> dict[str, Any]:
    return event.model_dump(mode="json")


def encode(event: BaseModel) -> bytes:
    return orjson.dumps(event.model_dump(mode="python"))


# ---------------------------------------------------------------- error mapping


def _field_path(loc: tuple, obj: Any) -> tuple[str, ...]:
    """pydantic's loc names union tags as if they were fields ("action.click.x"); drop them by
    walking the input, so the path names only real fields ("action.x")."""
    path: list[str] = []
    for part in loc:
        if isinstance(obj, dict) and part not in obj and any(obj.get(d) == part for d in DISCRIMINATORS):
            continue  # a tag, not a key
        path.append(str(part))
        if isinstance(obj, dict):
            obj = obj.get(part)
        elif isinstance(obj, list) and isinstance(part, int) and 0 <= part < len(obj):
            obj = obj[part]
        else:
            obj = None
    return tuple(path)


def _from_validation_error(exc: ValidationError, obj: Any = None) -> DecodeError:
    errors = exc.errors(include_url=False)
    # a record from a newer producer fails on many fields; its version is the one error to report
    for err in errors:
        path = _field_path(err.get("loc", ()), obj)
        if path[-1:] == ("schema_version",) and err.get("type") == "value_error":
            return SchemaVersionError(".".join(path), err.get("input"), str(err["ctx"]["error"]), "schema_version")
    err = errors[0]
    path = _field_path(err.get("loc", ()), obj)
    kind = err.get("type", "invalid")
    value = err.get("input")
    if kind == "extra_forbidden":
        reason = "unknown field"
    elif kind == "missing":
        reason = "missing field"
    elif kind == "union_tag_not_found":
        tag = str(err.get("ctx", {}).get("discriminator", "")).strip("'")
        path, reason, value = path + (tag,), "missing field", None
    elif kind == "union_tag_invalid":
        ctx = err.get("ctx", {})
        tag = str(ctx.get("discriminator", "")).strip("'")
        path, value = path + (tag,), ctx.get("tag")
        reason = f"unknown {tag} (expected one of {ctx.get('expected_tags')})"
    elif kind in ("model_type", "model_attributes_type", "dict_type") and not path:
        reason, kind = f"expected a JSON object, got {type(value).__name__}", "not_object"
    else:
        reason = err.get("msg", "invalid")
    more = len(errors) - 1
    if more:
        reason += f" (+{more} more error{'s' if more > 1 else ''})"
    return DecodeError(".".join(path), value, reason, kind)


# ---------------------------------------------------------------- validate / decode


def validate(obj: Any, tp: type[T] | Any) -> T:
    """Validate an already-parsed JSON value as ``tp``; raises DecodeError."""
    if not isinstance(obj, dict):
        raise DecodeError("", obj, f"expected a JSON object, got {type(obj).__name__}", "not_object")
    version = obj.get("schema_version", None)
    if version is not None and (type(version) is not int or version not in SUPPORTED_SCHEMA_VERSIONS):
        raise SchemaVersionError(
            "schema_version", version,
            f"unsupported schema_version (this build reads {sorted(SUPPORTED_SCHEMA_VERSIONS)})",
            "schema_version",
        )
    try:
        return _adapter(tp).validate_python(obj)
    except ValidationError as exc:
        raise _from_validation_error(exc, obj) from None
    except Exception as exc:  # a validator bug must not crash the caller
        raise DecodeError("", None, f"{type(exc).__name__}: {exc}", "internal") from None


def _explain(data: bytes | str, tp: Any, fast_error: ValidationError | None) -> DecodeError:
    """The slow, precise path for a record that failed: orjson parse, then field-by-field."""
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        text = str(exc)
        reason = "invalid UTF-8" if "utf-8" in text.lower() or "surrogate" in text.lower() else f"invalid JSON: {text}"
        return DecodeError("", bytes(data[:80]) if isinstance(data, (bytes, bytearray, memoryview)) else data[:80],
                           reason, "invalid_json")
    try:
        validate(obj, tp)
    except DecodeError as exc:
        return exc
    # orjson and pydantic's parser disagreed (should not happen): report pydantic's verdict
    if fast_error is not None:
        return _from_validation_error(fast_error, obj)
    return DecodeError("", None, "record rejected by the fast path only", "internal")


def decode(data: bytes | bytearray | memoryview | str | None, tp: type[T] | Any) -> T:
    """Parse and validate one record; raises DecodeError (bad JSON, bad UTF-8, bad fields)."""
    if data is None:
        raise DecodeError("", None, "empty record (tombstone)", "empty")
    if isinstance(data, memoryview):
        data = data.tobytes()
    if not isinstance(data, (bytes, bytearray, str)):
        raise DecodeError("", type(data).__name__, "expected bytes", "not_bytes")
    if not data:
        raise DecodeError("", b"", "empty record", "empty")
    try:
        return _adapter(tp).validate_json(data)
    except ValidationError as exc:
        raise _explain(data, tp, exc) from None
    except Exception as exc:  # a validator bug must not crash the caller
        raise DecodeError("", None, f"{type(exc).__name__}: {exc}", "internal") from None
