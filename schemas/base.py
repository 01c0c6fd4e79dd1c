"""Shared base model and field types for every Flywheel event."""

from __future__ import annotations

import math
import time
from typing import Annotated, Any, ClassVar

from pydantic import (AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, JsonValue, StringConstraints,
                      model_serializer)

SCHEMA_VERSION = 1
SUPPORTED_SCHEMA_VERSIONS = frozenset({1})

# Oversize strings are rejected rather than truncated: a 64 KiB thought is a bug upstream.
MAX_TEXT = 64 * 1024
MAX_RAW_OUTPUT = 128 * 1024
Id = Annotated[str, StringConstraints(min_length=1, max_length=256, pattern=r"^[A-Za-z0-9_.:\-/]+$")]
Name = Annotated[str, StringConstraints(min_length=1, max_length=256)]
Text = Annotated[str, StringConstraints(max_length=MAX_TEXT)]
RawText = Annotated[str, StringConstraints(max_length=MAX_RAW_OUTPUT)]
Unit = Annotated[float, Field(ge=0.0, le=1.0)]
# Integers that land in ClickHouse UInt32 / Int32 / Int64 columns: the schema bounds equal the
# DDL's (infra/clickhouse/sql), so a value the table would reject never passes validation.
UInt32 = Annotated[int, Field(ge=0, le=2**32 - 1)]
Int32 = Annotated[int, Field(ge=-(2**31), le=2**31 - 1)]
Int64 = Annotated[int, Field(ge=-(2**63), le=2**63 - 1)]
Sha256 = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
Timestamp = Annotated[float, Field(ge=0.0, description="seconds since the Unix epoch")]
# Free-form JSON (task params, model config): JSON values only, so encode never fails later.
JsonDict = dict[str, JsonValue]


def _supported_version(v: int) -> int:
    if v not in SUPPORTED_SCHEMA_VERSIONS:
        raise ValueError(f"unsupported schema_version (this build reads {sorted(SUPPORTED_SCHEMA_VERSIONS)})")
    return v


SchemaVersion = Annotated[int, AfterValidator(_supported_version),
                          Field(json_schema_extra={"enum": sorted(SUPPORTED_SCHEMA_VERSIONS)})]


def _drop_non_finite(value: Any) -> Any:
    # A metric that is undefined this update (explained variance of constant returns) is
    # left out rather than sent as NaN, which JSON cannot carry.
    if isinstance(value, dict):
        return {k: v for k, v in value.items() if not (isinstance(v, float) and not math.isfinite(v))}
    return value


Metrics = Annotated[dict[str, float], BeforeValidator(_drop_non_finite)]


def now() -> float:
    return time.time()


class Model(BaseModel):
    """Strict, closed, immutable: unknown fields, silent coercions and NaN/inf are errors.

    NaN and infinities are refused because JSON has no spelling for them (orjson would write
    null and the record would fail to decode on the next hop).
    """

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, validate_default=False,
                              allow_inf_nan=False)


class Event(Model):
    """Top-level event on a topic: versioned, with a deterministic id for dedupe."""

    schema_version: SchemaVersion = SCHEMA_VERSION

    @property
    def event_id(self) -> str:  # pragma: no cover - every event overrides
        raise NotImplementedError


class OmitsAbsentOptionals(Model):
    """A mixin for an event that gained optional fields after its consumers were written: each
    field named in ``omit_when_none`` is left out of the record while it is None, so a record
    that does not use it is byte for byte what an older consumer (strict: unknown fields are
    errors) already reads; reading it back gives the field's default, None."""

    omit_when_none: ClassVar[tuple[str, ...]] = ()

    @model_serializer(mode="wrap")
    def _omit_absent(self, handler):
        data = handler(self)
        for name in self.omit_when_none:
            if name in data and data[name] is None:
                del data[name]
        return data
