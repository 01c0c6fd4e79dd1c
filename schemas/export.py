"""JSON Schema export: one schema per event type, the public contract for outside consumers.

``export_schemas(dir)`` writes ``<Name>.schema.json`` for every type in ``SCHEMA_TYPES``
(deterministic bytes: sorted keys, so the committed copies under ``schemas/json/`` can be
checked for drift). The schemas describe what ``decode`` accepts (pydantic's validation mode,
draft 2020-12): closed objects, ranges, patterns, and the discriminators of the unions.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter

from schemas.actions import Action
from schemas.base import SCHEMA_VERSION
from schemas.events import EVENT_TYPES

DRAFT = "https://json-schema.org/draft/2020-12/schema"
SCHEMA_TYPES: dict[str, Any] = {**EVENT_TYPES, "Action": Action}
COMMITTED_DIR = Path(__file__).parent / "json"


def json_schema(name: str) -> dict[str, Any]:
    schema = TypeAdapter(SCHEMA_TYPES[name]).json_schema(mode="validation")
    schema = {"$schema": DRAFT, "$id": f"urn:flywheel:schema:v{SCHEMA_VERSION}:{name}", "title": name, **schema}
    return schema


def render(name: str) -> str:
    return json.dumps(json_schema(name), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def export_schemas(directory: str | Path) -> list[Path]:
    """Write one JSON Schema file per type into ``directory`` (created); return the paths."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in SCHEMA_TYPES:
        path = out / f"{name}.schema.json"
        path.write_text(render(name), encoding="utf-8")
        paths.append(path)
    return paths
