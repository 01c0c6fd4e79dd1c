"""Shared base model and field types for every Flywheel event."""

from __future__ import annotations

import time
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

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
Sha256 = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
Timestamp = Annotated[float, Field(ge=0.0, description="seconds since the Unix epoch")]


def now() -> float:
    return time.time()


class Model(BaseModel):
    """Strict, closed, immutable: unknown fields and silent coercions are errors."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, validate_default=False)


class Event(Model):
    """Top-level event on a topic: versioned, with a deterministic id for dedupe."""

    schema_version: int = SCHEMA_VERSION

    @property
    def event_id(self) -> str:  # pragma: no cover - every event overrides
        raise NotImplementedError
