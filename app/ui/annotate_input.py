"""What the Annotate view and the corrections accept: request bodies -> unified actions (pure).

The page sends pointer positions in the screenshot's pixels; they become ``schemas.actions``
with coordinates normalised to [0, 1] of that screen. Anything else (a position off the screen,
text past ``MAX_TYPED``, a key no backend knows, a task that is not registered, a hostile name)
is refused with ``UiInputError`` naming the field, before a sandbox sees it.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import ValidationError

from app.ui.queries import UiInputError
from producers.human import annotation_task, human_policy
from schemas.actions import Click, Drag, Finished, Hotkey, LeftDouble, RightSingle, Scroll, Type
from schemas.convert import UnsupportedAction, playwright_combo
from schemas.events import TaskSpec

MAX_TYPED = 1000  # characters one "type" action may carry
MAX_THOUGHT = 2000
MAX_KEY = 64
_POINTS = {"click": Click, "left_double": LeftDouble, "right_single": RightSingle}
ACTION_TYPES = (*_POINTS, "drag", "scroll", "type", "hotkey", "finished")
DIRECTIONS = ("up", "down", "left", "right")


def body_dict(body: Any) -> dict:
    if not isinstance(body, dict):
        raise UiInputError("body: expected a JSON object")
    return body


def text_field(body: dict, field: str, limit: int, required: bool = False) -> str:
    value = body.get(field, "")
    if value is None:
        value = ""
    if not isinstance(value, str):
        raise UiInputError(f"{field}: expected a string")
    if required and not value:
        raise UiInputError(f"{field}: required")
    if len(value) > limit:
        raise UiInputError(f"{field}: {len(value)} characters, at most {limit}")
    if "\x00" in value:
        raise UiInputError(f"{field}: contains a NUL character")
    if not value.isascii():
        try:
            value.encode()
        except UnicodeEncodeError:  # JSON's "\ud800": a lone surrogate no event can carry
            raise UiInputError(f"{field}: not Unicode text (a lone surrogate)") from None
    return value


def int_field(body: dict, field: str, low: int, high: int) -> int:
    value = body.get(field)
    if isinstance(value, str) and value.strip().isascii() and value.strip().isdigit() and len(value.strip()) < 12:
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise UiInputError(f"{field}: {str(value)[:40]!r} is not an integer in [{low}, {high}]")
    return value


def coordinate(body: dict, field: str, size: int) -> float:
    """A pixel position on a screen ``size`` pixels long -> normalised to [0, 1]."""
    value = body.get(field)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (
            isinstance(value, float) and not math.isfinite(value)):  # math.isfinite(10**400): OverflowError
        raise UiInputError(f"{field}: {str(value)[:40]!r} is not a number")
    if not 0 <= value <= size:
        raise UiInputError(f"{field}: {str(value)[:40]} is outside the screen (0 to {size} pixels)")
    return min(value / size, 1.0)


def parse_action(body: Any, width: int, height: int) -> tuple[Any, str]:
    """(unified action, thought) from the page's request on a ``width`` x ``height`` screen."""
    body = body_dict(body)
    kind = body.get("type")
    if kind not in ACTION_TYPES:
        raise UiInputError(f"type: {str(kind)[:40]!r} is not one of {', '.join(ACTION_TYPES)}")
    thought = text_field(body, "thought", MAX_THOUGHT)
    if kind in _POINTS:
        return _POINTS[kind](x=coordinate(body, "x", width), y=coordinate(body, "y", height)), thought
    if kind == "drag":
        return Drag(x1=coordinate(body, "x1", width), y1=coordinate(body, "y1", height),
                    x2=coordinate(body, "x2", width), y2=coordinate(body, "y2", height)), thought
    if kind == "scroll":
        direction = body.get("direction")
        if direction not in DIRECTIONS:
            raise UiInputError(f"direction: {str(direction)[:40]!r} is not one of {', '.join(DIRECTIONS)}")
        return Scroll(x=coordinate(body, "x", width), y=coordinate(body, "y", height), direction=direction), thought
    if kind == "type":
        return Type(content=text_field(body, "text", MAX_TYPED, required=True)), thought
    if kind == "hotkey":
        key = text_field(body, "key", MAX_KEY, required=True)
        try:
            playwright_combo(key)
        except UnsupportedAction as exc:
            raise UiInputError(f"key: {exc}") from None
        return Hotkey(key=key), thought
    return Finished(), thought


def parse_name(body: dict) -> str:
    """``human:<name>`` from the body's ``name``."""
    try:
        return human_policy(text_field(body, "name", 64, required=True))
    except ValueError as exc:
        raise UiInputError(f"name: {exc}") from None


def parse_session(body: Any, max_steps: int, timeout_s: float) -> tuple[TaskSpec, str]:
    """(the annotation episode's task, the policy ``human:<name>``) from the page's request."""
    body = body_dict(body)
    name = text_field(body, "task", 128, required=True)
    seed = int_field(body, "seed", 0, 2**31 - 1)
    policy = parse_name(body)
    try:
        return annotation_task(name, seed, max_steps, timeout_s), policy
    except (ValueError, ValidationError) as exc:
        raise UiInputError(f"task: {str(exc).splitlines()[0][:200]}") from None
