"""The unified action space (UI-TARS Table 1 plus UI-TARS-2's GUI-SDK actions).

Coordinates are normalised to [0, 1] of the screen; the screen size travels beside them in the
step's observation, so ``x * width`` gives pixels. One class per action type, joined into the
``Action`` discriminated union on ``type``.
"""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import Field, StringConstraints

from schemas.base import Model, Text, Unit

Path = Annotated[str, StringConstraints(min_length=1, max_length=4096)]
Key = Annotated[str, StringConstraints(min_length=1, max_length=128)]


class Click(Model):
    type: Literal["click"] = "click"
    x: Unit
    y: Unit


class LeftDouble(Model):
    type: Literal["left_double"] = "left_double"
    x: Unit
    y: Unit


class RightSingle(Model):
    type: Literal["right_single"] = "right_single"
    x: Unit
    y: Unit


class LongPress(Model):
    type: Literal["long_press"] = "long_press"
    x: Unit
    y: Unit


class Drag(Model):
    type: Literal["drag"] = "drag"
    x1: Unit
    y1: Unit
    x2: Unit
    y2: Unit


class Scroll(Model):
    type: Literal["scroll"] = "scroll"
    x: Unit
    y: Unit
    direction: Literal["up", "down", "left", "right"]


class Type(Model):
    type: Literal["type"] = "type"
    content: Text


class Hotkey(Model):
    type: Literal["hotkey"] = "hotkey"
    key: Key  # space-separated combo as UI-TARS writes it, e.g. "ctrl c"


class Wait(Model):
    type: Literal["wait"] = "wait"


class Finished(Model):
    type: Literal["finished"] = "finished"
    content: Text = ""


class CallUser(Model):
    type: Literal["call_user"] = "call_user"


class PressBack(Model):
    type: Literal["press_back"] = "press_back"


class PressHome(Model):
    type: Literal["press_home"] = "press_home"


class PressEnter(Model):
    type: Literal["press_enter"] = "press_enter"


class OpenApp(Model):
    type: Literal["open_app"] = "open_app"
    app_name: Key


class Shell(Model):
    """GUI-SDK: run a shell command in the episode's jail."""

    type: Literal["shell"] = "shell"
    command: Text


class FileRead(Model):
    """GUI-SDK: read a file inside the episode's jail."""

    type: Literal["file_read"] = "file_read"
    path: Path


class FileWrite(Model):
    """GUI-SDK: write a file inside the episode's jail."""

    type: Literal["file_write"] = "file_write"
    path: Path
    content: Text


Action = Annotated[
    Union[
        Click, LeftDouble, RightSingle, LongPress, Drag, Scroll, Type, Hotkey, Wait, Finished,
        CallUser, PressBack, PressHome, PressEnter, OpenApp, Shell, FileRead, FileWrite,
    ],
    Field(discriminator="type"),
]

ACTION_TYPES: tuple[str, ...] = (
    "click", "left_double", "right_single", "long_press", "drag", "scroll", "type", "hotkey", "wait",
    "finished", "call_user", "press_back", "press_home", "press_enter", "open_app", "shell",
    "file_read", "file_write",
)
POINTER_ACTIONS = frozenset({"click", "left_double", "right_single", "long_press", "scroll"})
SDK_ACTIONS = frozenset({"shell", "file_read", "file_write"})
TERMINAL_ACTIONS = frozenset({"finished", "call_user"})
