"""Exported JSON Schemas: real serialized events of every type validate against them with the
``jsonschema`` package, as an outside consumer would; the committed copies are up to date."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import jsonschema
import orjson
import pytest
from hypothesis import HealthCheck, given, settings

from app.cli import main
from schemas.codec import encode
from schemas.export import COMMITTED_DIR, SCHEMA_TYPES, export_schemas, render

from schemas_strategies import ACTIONS, EVENTS
from test_schemas_codec import STEP, mutated, _set

HEALTH = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example]


@lru_cache(maxsize=None)
def committed_validator(name: str) -> jsonschema.Draft202012Validator:
    schema = json.loads((COMMITTED_DIR / f"{name}.schema.json").read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


@pytest.mark.parametrize("name", sorted(SCHEMA_TYPES))
def test_committed_schemas_are_up_to_date(name):
    committed = (COMMITTED_DIR / f"{name}.schema.json").read_text(encoding="utf-8")
    assert committed == render(name), f"run `flywheel schemas export schemas/json` and commit ({name} drifted)"


def test_export_writes_one_file_per_type(tmp_path):
    paths = export_schemas(tmp_path / "out")
    assert sorted(p.name for p in paths) == sorted(f"{n}.schema.json" for n in SCHEMA_TYPES)
    assert {p.name for p in (tmp_path / "out").iterdir()} == {p.name for p in paths}


def test_cli_export(tmp_path, capsys):
    assert main(["schemas", "export", str(tmp_path)]) == 0
    printed = capsys.readouterr().out.split()
    assert len(printed) == len(SCHEMA_TYPES) and all(Path(p).exists() for p in printed)


@pytest.mark.parametrize("name", sorted(EVENTS))
def test_serialized_events_validate_against_exported_schema(name):
    validator = committed_validator(name)

    @settings(max_examples=25, deadline=None, suppress_health_check=HEALTH)
    @given(EVENTS[name])
    def check(event):
        validator.validate(json.loads(encode(event)))  # the consumer's own JSON parser

    check()


@settings(max_examples=100, deadline=None)
@given(ACTIONS)
def test_actions_validate_against_exported_schema(action):
    committed_validator("Action").validate(json.loads(orjson.dumps(action.model_dump())))


@pytest.mark.parametrize("change", [_set("bogus", 1), _set("action.x", 1.5), _set("kind", "teleported"),
                                    _set("step_index", "3"), _set("observation.screenshot.sha256", "xyz"),
                                    _set("schema_version", 2)],
                         ids=["unknown field", "x out of range", "unknown kind", "wrong type", "bad sha", "version"])
def test_exported_schema_rejects_what_decode_rejects(change):
    validator = committed_validator("EpisodeEvent")
    assert validator.is_valid(json.loads(encode(STEP)))
    assert not validator.is_valid(json.loads(mutated(STEP, change)))
