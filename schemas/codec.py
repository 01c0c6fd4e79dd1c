"""orjson serialization and strict decoding with precise errors.

``encode(event) -> bytes`` and ``decode(data, EventType) -> event``. ``decode`` raises only
``DecodeError`` (field, value, reason), never anything else, so a stage can send the record to
the dead-letter topic and keep going.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, TypeVar

import orjson
from pydantic import BaseModel, TypeAdapter, ValidationError

from schemas.base import SUPPORTED_SCHEMA_VERSIONS

T = TypeVar("T")


class DecodeError(ValueError):
    """A record that is not a valid event: which field, what value, why."""

    def __init__(self, field: str, value: Any, reason: str, error_type: str = "invalid") -> None:
        self.field = field
        self.value = value
        self.reason = reason
        self.error_type = error_type
        shown = repr(value)
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


def _from_validation_error(exc: ValidationError) -> DecodeError:
    err = exc.errors(include_url=False)[0]
    loc = ".".join(str(p) for p in err.get("loc", ()))
    kind = err.get("type", "invalid")
    if kind == "extra_forbidden":
        reason = "unknown field"
    elif kind == "missing":
        reason = "missing field"
    else:
        reason = err.get("msg", "invalid")
    more = exc.error_count() - 1
    if more:
        reason += f" (+{more} more error{'s' if more > 1 else ''})"
    return DecodeError(loc, err.get("input"), reason, kind)


def validate(obj: Any, tp: type[T] | Any) -> T:
    """Validate an already-parsed dict as ``tp``; raises DecodeError."""
    if isinstance(obj, dict):
        version = obj.get("schema_version", None)
        if version is not None and version not in SUPPORTED_SCHEMA_VERSIONS:
            raise SchemaVersionError(
                "schema_version", version,
                f"unsupported schema_version (this build reads {sorted(SUPPORTED_SCHEMA_VERSIONS)})",
                "schema_version",
            )
    elif obj is not None:
        raise DecodeError("", obj, f"expected a JSON object, got {type(obj).__name__}", "not_object")
    try:
        return _adapter(tp).validate_python(obj)
    except ValidationError as exc:
        raise _from_validation_error(exc) from None
    except Exception as exc:  # a validator bug must not crash the caller
        raise DecodeError("", None, f"{type(exc).__name__}: {exc}", "internal") from None


def decode(data: bytes | None, tp: type[T] | Any) -> T:
    """Parse and validate one record; raises DecodeError (bad JSON, bad UTF-8, bad fields)."""
    if data is None:
        raise DecodeError("", None, "empty record (tombstone)", "empty")
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        reason = "invalid UTF-8" if "utf-8" in str(exc).lower() else f"invalid JSON: {exc}"
        raise DecodeError("", bytes(data[:80]), reason, "invalid_json") from None
    return validate(obj, tp)
