"""UI-TARS model output <-> unified ``Action``, through ByteDance's ``ui-tars`` package.

Parsing is ``ui_tars.action_parser.parse_action_to_structure_output`` (their parser, not ours);
this module only maps its structured output to our Action and turns every failure into data:
``parse_output`` never raises, an unparseable output gives ``ParsedOutput(action=None,
error=...)`` so the step is still recorded with a parse-error flag.

Formats accepted (all through their parser): ``point='<point>x y</point>'``,
``start_box='(x,y)'`` / ``'(x1,y1,x2,y2)'`` (a box becomes its centre), box tokens
``<|box_start|>(x,y)<|box_end|>`` (stripped before their parser, which does not know them),
``start_point=`` / ``end_point=``, and ``Thought:`` / ``Reflection:`` / ``Action_Summary:``
preambles. Coordinate modes:

- ``"qwen25vl"``: absolute pixels of the smart-resized image (UI-TARS-1.5 / Qwen2.5-VL): the
  image of ``width x height`` is resized to multiples of 28 within [min_pixels, max_pixels];
- ``"1000"``: relative coordinates on a 0..``factor`` grid (UI-TARS-1 / Qwen2-VL, factor 1000).

``render_action`` writes the action string back; coordinates are quantised to the mode's grid,
so ``parse(render(a)) == snap_action(a)`` and, for an already snapped action, ``== a`` exactly.
"""

from __future__ import annotations

import ast
import contextlib
import io
import math
import threading
import warnings
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import TypeAdapter, ValidationError
from ui_tars.action_parser import MAX_PIXELS, MIN_PIXELS, parse_action_to_structure_output, smart_resize

from schemas.actions import (
    Action, CallUser, Click, Drag, FileRead, FileWrite, Finished, Hotkey, LeftDouble, LongPress,
    OpenApp, PressBack, PressEnter, PressHome, RightSingle, Scroll, Shell, Type, Wait,
)

CoordMode = Literal["qwen25vl", "1000"]
COORD_MODES: tuple[str, ...] = ("qwen25vl", "1000")
PointStyle = Literal["point", "box", "box_token"]
IMAGE_FACTOR = 28  # Qwen2.5-VL patch merge size; smart_resize rounds to multiples of it

_ACTION = TypeAdapter(Action)
# Their parser print()s on failure; sys.stdout and the warning filters are process-wide, so
# they are redirected under a lock.
_STDOUT_LOCK = threading.Lock()


@dataclass(frozen=True)
class ParsedOutput:
    thought: str
    action: Action | None
    error: str | None = None
    extra_actions: int = 0  # actions after the first (a step executes one action)


@dataclass(frozen=True)
class Grid:
    """The integer grid the model writes coordinates on: x_model = x * width_units."""

    width_units: int
    height_units: int


def grid(screen_width: int, screen_height: int, coord_mode: str = "qwen25vl", *, factor: int = 1000,
         min_pixels: int = MIN_PIXELS, max_pixels: int = MAX_PIXELS) -> Grid:
    if coord_mode == "qwen25vl":
        h, w = smart_resize(screen_height, screen_width, factor=IMAGE_FACTOR,
                            min_pixels=min_pixels, max_pixels=max_pixels)
        return Grid(w, h)
    if coord_mode == "1000":
        return Grid(factor, factor)
    raise ValueError(f"unknown coord_mode {coord_mode!r} (known: {', '.join(COORD_MODES)})")


# ---------------------------------------------------------------- parsing


def _strip_box_tokens(text: str) -> str:
    return text.replace("<|box_start|>", "").replace("<|box_end|>", "")


def _point(value: Any, name: str) -> tuple[float, float]:
    """Their parser gives "[x1, y1, x2, y2]" already normalised; a box becomes its centre."""
    nums = ast.literal_eval(value) if isinstance(value, str) else value
    if not isinstance(nums, (list, tuple)) or len(nums) not in (2, 4):
        raise ValueError(f"{name}: expected 2 or 4 numbers, got {value!r}")
    x1, y1, x2, y2 = (nums * 2) if len(nums) == 2 else nums
    x, y = (x1 + x2) / 2, (y1 + y2) / 2
    if not (math.isfinite(x) and math.isfinite(y) and 0.0 <= x <= 1.0 and 0.0 <= y <= 1.0):
        raise ValueError(f"{name}: point ({x:.4f}, {y:.4f}) is outside the screen")
    return x, y


def _to_action(kind: str, args: dict[str, Any]) -> Any:
    def text(key: str, *alts: str) -> str:
        for k in (key, *alts):
            if k in args:
                return args[k]
        return ""

    def point(key: str = "start_box") -> tuple[float, float]:
        if key not in args:
            raise ValueError(f"{kind}: missing {key}")
        return _point(args[key], key)

    if kind in ("click", "left_single"):
        x, y = point()
        return Click(x=x, y=y)
    if kind in ("left_double", "double_click"):
        x, y = point()
        return LeftDouble(x=x, y=y)
    if kind == "right_single":
        x, y = point()
        return RightSingle(x=x, y=y)
    if kind == "long_press":
        x, y = point()
        return LongPress(x=x, y=y)
    if kind in ("drag", "select"):
        (x1, y1), (x2, y2) = point("start_box"), point("end_box")
        return Drag(x1=x1, y1=y1, x2=x2, y2=y2)
    if kind == "scroll":
        # UI-TARS may scroll without a point: the screen centre is where the wheel goes.
        x, y = point() if "start_box" in args else (0.5, 0.5)
        direction = str(args.get("direction", "")).strip().lower()
        if direction not in ("up", "down", "left", "right"):
            raise ValueError(f"scroll: direction must be up, down, left or right, got {direction!r}")
        return Scroll(x=x, y=y, direction=direction)
    if kind == "type":
        return Type(content=text("content"))
    if kind in ("hotkey", "press", "keydown"):
        return Hotkey(key=text("key", "hotkey", "press"))
    simple = {"wait": Wait, "call_user": CallUser, "press_back": PressBack, "press_home": PressHome,
              "press_enter": PressEnter}
    if kind in simple:
        return simple[kind]()
    if kind == "finished":
        return Finished(content=text("content"))
    if kind == "open_app":
        return OpenApp(app_name=text("app_name"))
    if kind == "shell":
        return Shell(command=text("command"))
    if kind == "file_read":
        return FileRead(path=text("path"))
    if kind == "file_write":
        return FileWrite(path=text("path"), content=text("content"))
    raise ValueError(f"unknown action type {kind!r}")


def parse_output(text: str, screen_width: int, screen_height: int, *, coord_mode: str = "qwen25vl",
                 factor: int = 1000, min_pixels: int = MIN_PIXELS, max_pixels: int = MAX_PIXELS) -> ParsedOutput:
    """Parse one UI-TARS response; never raises.

    ``screen_width`` x ``screen_height`` is the size of the screenshot the model saw (qwen25vl
    coordinates are pixels of its smart-resized copy). ``factor`` is the grid of the "1000" mode.
    """
    if coord_mode not in COORD_MODES:
        return ParsedOutput("", None, f"unknown coord_mode {coord_mode!r} (known: {', '.join(COORD_MODES)})")
    if not isinstance(text, str) or not text.strip():
        return ParsedOutput("", None, "empty model output")
    if "Action:" not in text:
        return ParsedOutput("", None, "no 'Action:' in model output")
    printed = io.StringIO()
    try:
        with _STDOUT_LOCK, contextlib.redirect_stdout(printed), warnings.catch_warnings():
            warnings.simplefilter("ignore", SyntaxWarning)  # ast.parse of a bad escape in model text
            parsed = parse_action_to_structure_output(
                _strip_box_tokens(text), factor, screen_height, screen_width,
                model_type="qwen25vl" if coord_mode == "qwen25vl" else "qwen2vl",
                max_pixels=max_pixels, min_pixels=min_pixels)
    except Exception as exc:  # their parser raises whatever it hits (ValueError, AssertionError, ...)
        detail = str(exc) or printed.getvalue().strip() or type(exc).__name__
        return ParsedOutput("", None, f"unparseable action: {detail[:500]}")
    if not parsed:
        return ParsedOutput("", None, "no action in model output")
    first = parsed[0]
    thought = first.get("thought") or ""
    try:
        action = _to_action(str(first.get("action_type")), first.get("action_inputs") or {})
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        loc = ".".join(str(p) for p in err["loc"])
        return ParsedOutput(thought, None, f"invalid {first.get('action_type')} action: {loc}: {err['msg']}")
    except Exception as exc:
        return ParsedOutput(thought, None, f"invalid action: {str(exc)[:500] or type(exc).__name__}")
    return ParsedOutput(thought, action, None, extra_actions=len(parsed) - 1)


# ---------------------------------------------------------------- rendering

# Substrings their parser rewrites anywhere in the text (point= -> start_box=, <point>...,
# "Action: " splits, "type(content" triggers type handling): broken with an escape that
# Python's literal parser (their ast_parse) turns back into the same characters.
_BREAK = (("point=", "point\\x3d"), ("<point>", "<point\\x3e"), ("Action: ", "Action:\\x20"),
          ("type(content", "type\\x28content"))


def _quote(value: str) -> str:
    out = []
    for i, ch in enumerate(value):
        if ch == "\\":
            out.append("\\\\")
        elif ch == "'":
            # their type() handling stops at the first "')", even an escaped one
            out.append("\\x27" if value[i + 1:i + 2] == ")" else "\\'")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif not ch.isprintable():
            code = ord(ch)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
        else:
            out.append(ch)
    quoted = "".join(out)
    for raw, escaped in _BREAK:
        quoted = quoted.replace(raw, escaped)
    return f"'{quoted}'"


def _units(x: float, y: float, g: Grid) -> tuple[int, int]:
    return round(x * g.width_units), round(y * g.height_units)


def _coord(name: str, x: float, y: float, g: Grid, style: str) -> str:
    ux, uy = _units(x, y, g)
    if style == "point":
        key = {"start_box": "point", "end_box": "end_point"}[name]
        return f"{key}='<point>{ux} {uy}</point>'"
    if style == "box_token":
        return f"{name}='<|box_start|>({ux},{uy})<|box_end|>'"
    return f"{name}='({ux},{uy})'"


def render_action(action: Any, screen_width: int, screen_height: int, coord_mode: str = "qwen25vl", *,
                  style: PointStyle = "point", factor: int = 1000, min_pixels: int = MIN_PIXELS,
                  max_pixels: int = MAX_PIXELS) -> str:
    """Action -> UI-TARS action string, e.g. ``click(point='<point>640 360</point>')``."""
    g = grid(screen_width, screen_height, coord_mode, factor=factor, min_pixels=min_pixels, max_pixels=max_pixels)
    if style not in ("point", "box", "box_token"):
        raise ValueError(f"unknown style {style!r}")

    def at(x: float, y: float) -> str:
        return _coord("start_box", x, y, g, style)

    t = action.type
    if t in ("click", "left_double", "right_single", "long_press"):
        return f"{t}({at(action.x, action.y)})"
    if t == "drag":
        start = _coord("start_box", action.x1, action.y1, g, style)
        if style == "point":
            start = start.replace("point=", "start_point=", 1)
        return f"drag({start}, {_coord('end_box', action.x2, action.y2, g, style)})"
    if t == "scroll":
        return f"scroll({at(action.x, action.y)}, direction='{action.direction}')"
    if t in ("type", "finished"):
        return f"{t}(content={_quote(action.content)})"
    if t == "hotkey":
        return f"hotkey(key={_quote(action.key)})"
    if t == "open_app":
        return f"open_app(app_name={_quote(action.app_name)})"
    if t == "shell":
        return f"shell(command={_quote(action.command)})"
    if t == "file_read":
        return f"file_read(path={_quote(action.path)})"
    if t == "file_write":
        return f"file_write(path={_quote(action.path)}, content={_quote(action.content)})"
    if t in ("wait", "call_user", "press_back", "press_home", "press_enter"):
        return f"{t}()"
    raise ValueError(f"cannot render action type {t!r}")


def render_output(thought: str, action_str: Any, screen_width: int | None = None, screen_height: int | None = None,
                  coord_mode: str = "qwen25vl", **kwargs: Any) -> str:
    """``Thought: ...\\nAction: ...``; ``action_str`` is a rendered string or an Action (then give the size)."""
    if not isinstance(action_str, str):
        if screen_width is None or screen_height is None:
            raise ValueError("render_output(thought, Action) needs screen_width and screen_height")
        action_str = render_action(action_str, screen_width, screen_height, coord_mode, **kwargs)
    thought = thought.strip()
    return f"Thought: {thought}\nAction: {action_str}" if thought else f"Action: {action_str}"


def snap_action(action: Any, screen_width: int, screen_height: int, coord_mode: str = "qwen25vl", **kwargs: Any) -> Any:
    """The action with its coordinates on the mode's grid: what ``parse(render(action))`` gives."""
    g = grid(screen_width, screen_height, coord_mode, **kwargs)

    def snap(x: float, units: int) -> float:
        return float(round(x * units)) / units  # the same arithmetic as their parser

    updates: dict[str, float] = {}
    for fx, fy in (("x", "y"), ("x1", "y1"), ("x2", "y2")):
        if hasattr(action, fx):
            updates[fx] = snap(getattr(action, fx), g.width_units)
            updates[fy] = snap(getattr(action, fy), g.height_units)
    return action.model_copy(update=updates) if updates else action


def validate_action(obj: Any) -> Any:
    """A dict -> Action (for callers holding JSON)."""
    return _ACTION.validate_python(obj)
