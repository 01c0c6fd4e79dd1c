"""Typed configs resolved from arguments, then a config file, then FLYWHEEL_* environment
variables, then defaults.

Every process has one config: a dataclass whose fields carry a one-line ``help`` in their
metadata. ``add_arguments`` turns it into argparse options, ``resolve`` builds it with the
precedence arguments > a config file's values (``file_values``: a JSON object of fields, as a run
writes its children's resolved configs) > environment > defaults, and ``describe`` renders it for
the start-up log with secrets masked.

    @dataclass
    class TrainerConfig:
        batch_episodes: int = opt(32, "complete trajectories per PPO update")

    cfg = resolve(TrainerConfig, vars(parser.parse_args()))
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import os
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")
ENV_PREFIX = "FLYWHEEL_"
_SECRET_WORDS = ("password", "secret", "token", "key_file", "ssl_key")


class ConfigError(ValueError):
    """A setting has a value that cannot be used; the message says which and how to fix it."""


def json_object(text: str, name: str) -> dict:
    """An option holding a JSON object (empty text: {}); ConfigError naming ``name`` otherwise."""
    try:
        value = json.loads(text) if text else {}
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{name} is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ConfigError(f"{name} must be a JSON object, e.g. '{{\"ground\": false}}'")
    return value


def opt(default: Any, help: str, *, secret: bool = False, choices: tuple | None = None) -> Any:
    """A config field with its one-line documentation."""
    meta = {"help": help, "secret": secret, "choices": choices}
    if isinstance(default, (list, dict, set)):
        return dataclasses.field(default_factory=lambda: type(default)(default), metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def env_name(field_name: str) -> str:
    return ENV_PREFIX + field_name.upper()


def _field_type(cls: type, f: dataclasses.Field) -> Any:
    hints = typing.get_type_hints(cls)
    return hints[f.name]


def _base_type(tp: Any) -> Any:
    """``int | None`` -> int; ``list[str]`` stays as is."""
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    if typing.get_origin(tp) in (typing.Union, getattr(__import__("types"), "UnionType", None)) and args:
        return args[0]
    return tp


def _parse(raw: Any, tp: Any, name: str, source: str) -> Any:
    if raw is None:
        return None
    base = _base_type(tp)
    if not isinstance(raw, str):
        return raw
    try:
        if base is bool:
            low = raw.strip().lower()
            if low in ("1", "true", "yes", "on"):
                return True
            if low in ("0", "false", "no", "off"):
                return False
            raise ValueError("expected true/false")
        if base is int:
            return int(raw)
        if base is float:
            return float(raw)
        if typing.get_origin(base) is list:
            return [s.strip() for s in raw.split(",") if s.strip()]
        if raw == "" and tp is not base:  # optional field set to empty -> None
            return None
        return raw
    except ValueError as exc:
        raise ConfigError(f"setting {name}={raw!r} from {source}: {exc}") from None


def resolve(cls: type[T], args: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None,
            file: Mapping[str, Any] | None = None) -> T:
    """Build ``cls`` from explicit args (non-None wins), then ``file`` (a config file's values,
    ``file_values``), then FLYWHEEL_* env, then defaults."""
    args = dict(args or {})
    env = os.environ if env is None else env
    file = file or {}
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        tp = _field_type(cls, f)
        if args.get(f.name) is not None:
            values[f.name] = _parse(args[f.name], tp, f.name, "arguments")
        elif f.name in file:
            values[f.name] = file[f.name]
        elif env_name(f.name) in env:
            values[f.name] = _parse(env[env_name(f.name)], tp, f.name, env_name(f.name))
        choices = f.metadata.get("choices")
        if choices and f.name in values and values[f.name] not in choices:
            raise ConfigError(f"setting {f.name}={values[f.name]!r}: choose one of {', '.join(map(str, choices))}")
    return cls(**values)


def file_values(cls: type, path: str | Path) -> dict[str, Any]:
    """The fields of ``cls`` that the JSON file ``path`` sets (``--config PATH``: one object, field
    name -> value, as ``config_json`` writes it), each of its field's type. ConfigError naming the
    file and the field for an unreadable file, anything but a JSON object, a field ``cls`` does not
    have, or a value of another type: refused before the command does anything."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError(f"--config {path}: cannot read it ({exc.strerror or exc})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"--config {path} is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"--config {path} must hold one JSON object of settings, field name -> value")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for name in data:
        if name not in fields:
            near = difflib.get_close_matches(name, fields, n=1)
            raise ConfigError(f"--config {path}: no setting {name!r}" + (f" (did you mean {near[0]!r}?)" if near else ""))
    return {name: _typed(value, _field_type(cls, fields[name]), f"--config {path}: {name}") for name, value in data.items()}


def _typed(value: Any, tp: Any, where: str) -> Any:
    """``value`` read from JSON as field type ``tp`` (an int is a float too); ConfigError otherwise."""
    base = _base_type(tp)
    if value is None and tp is not base:  # an optional field
        return None
    if base is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if typing.get_origin(base) is list and isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    if base in (bool, int, str) and isinstance(value, base) and (base is bool or not isinstance(value, bool)):
        return value
    want = getattr(base, "__name__", str(base)) if typing.get_origin(base) is not list else "a list of strings"
    raise ConfigError(f"{where} must be {want}, got {value!r}")


def config_json(cfg: Any) -> str:
    """``cfg`` whole as the JSON object ``file_values`` reads (secrets included: a file its owner
    hands a child, like the environment, not a log)."""
    return json.dumps(dataclasses.asdict(cfg), indent=2) + "\n"


def to_env(cfg: Any) -> dict[str, str]:
    """The FLYWHEEL_* variables that make ``resolve`` rebuild ``cfg`` in a child process, secrets
    included (the environment, unlike argv, is not visible to other users in `ps`)."""
    env: dict[str, str] = {}
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if value is None:
            continue
        if isinstance(value, bool):
            env[env_name(f.name)] = "true" if value else "false"
        elif isinstance(value, (list, tuple)):
            env[env_name(f.name)] = ",".join(map(str, value))
        else:
            env[env_name(f.name)] = str(value)
    return env


def add_arguments(parser: argparse.ArgumentParser, cls: type, *, skip: tuple[str, ...] = ()) -> None:
    """Add one ``--field-name`` option per field; defaults stay None so env/defaults apply."""
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        flag = "--" + f.name.replace("_", "-")
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
        help_text = f"{f.metadata.get('help', '')} (env {env_name(f.name)}; default {default!r})"
        kwargs: dict[str, Any] = {"dest": f.name, "default": None, "help": help_text}
        if f.metadata.get("choices"):
            kwargs["choices"] = f.metadata["choices"]
        if _base_type(_field_type(cls, f)) is bool:
            kwargs["action"] = argparse.BooleanOptionalAction  # --flag / --no-flag
        parser.add_argument(flag, **kwargs)


def is_secret(f: dataclasses.Field) -> bool:
    return bool(f.metadata.get("secret")) or any(w in f.name for w in _SECRET_WORDS)


def describe(cfg: Any) -> dict[str, Any]:
    """The resolved config as a dict for logging, secrets masked."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if dataclasses.is_dataclass(value):
            out[f.name] = describe(value)
        elif is_secret(f) and value:
            out[f.name] = "***"
        else:
            out[f.name] = value
    return out


def docs_table(cls: type) -> str:
    """A Markdown table of the fields, for the README."""
    rows = ["| setting | env | default | meaning |", "|---|---|---|---|"]
    for f in dataclasses.fields(cls):
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
        rows.append(f"| `{f.name}` | `{env_name(f.name)}` | `{default!r}` | {f.metadata.get('help', '')} |")
    return "\n".join(rows)
