"""Converters from a unified ``Action`` to the calls a sandbox makes: pyautogui or Playwright.

Both converters are pure: ``(action, screen_width, screen_height) -> [(method, args, kwargs)]``,
so they are tested without a display or a browser; ``apply_pyautogui`` / ``apply_playwright``
are the two-line loops that perform them.

What is converted and what is not (the sandbox decides what to do with the rest):

- GUI actions (click, left_double, right_single, long_press, drag, scroll, type, hotkey,
  press_enter, press_back) -> one or more calls. ``press_back`` is the desktop/browser "back"
  (alt+left in pyautogui, ``page.go_back()`` in Playwright).
- ``wait``, ``finished``, ``call_user`` -> ``[]``: they send no input to the GUI; the sandbox
  sleeps, ends the episode or hands over.
- GUI-SDK actions (``shell``, ``file_read``, ``file_write``) and the mobile-only ``press_home``
  and ``open_app`` -> ``UnsupportedAction`` (a ``ValueError``): silently doing nothing would
  record a step that never happened; the sandbox routes SDK actions to its SDK executor.
- A hotkey naming a key neither backend knows -> ``UnsupportedAction`` naming the key.

Pixels: a normalised coordinate ``x`` in [0, 1] maps to pixel ``floor(x * width)`` clamped to
``width - 1`` (pixel ``i`` covers ``[i/w, (i+1)/w)``); ``from_pixels`` returns the pixel centre,
so ``to_pixels(from_pixels(p)) == p``.
"""

from __future__ import annotations

from typing import Any

from schemas.actions import (
    Click, Drag, Hotkey, LeftDouble, LongPress, PressBack, PressEnter, RightSingle, Scroll, Type,
)

Call = tuple[str, tuple, dict]

SCROLL_CLICKS = 5  # UI-TARS' own pyautogui code scrolls 5 clicks per scroll action
SCROLL_PIXELS = 500  # the same distance for a browser wheel event (~100 px per click)
LONG_PRESS_S = 1.0
DRAG_DURATION_S = 0.5
NO_INPUT = frozenset({"wait", "finished", "call_user"})


class UnsupportedAction(ValueError):
    """The action has no GUI input equivalent in this backend (SDK or mobile-only action)."""


# ---------------------------------------------------------------- pixels


def to_pixels(x: float, y: float, width: int, height: int) -> tuple[int, int]:
    if width <= 0 or height <= 0:
        raise ValueError(f"screen size must be positive, got {width}x{height}")
    return min(int(x * width), width - 1), min(int(y * height), height - 1)


def from_pixels(px: float, py: float, width: int, height: int) -> tuple[float, float]:
    """Pixel -> normalised coordinate of the pixel's centre, clamped to [0, 1]."""
    if width <= 0 or height <= 0:
        raise ValueError(f"screen size must be positive, got {width}x{height}")
    return (min(max((px + 0.5) / width, 0.0), 1.0), min(max((py + 0.5) / height, 0.0), 1.0))


# ---------------------------------------------------------------- key names

# UI-TARS writes lowercase, space-separated combos ("ctrl c", "arrowleft", "space").
_KEY_ALIASES = {
    "control": "ctrl", "cmd": "command", "meta": "win", "super": "win", "windows": "win",
    "return": "enter", "escape": "esc", "del": "delete", "arrowleft": "left",
    "arrowright": "right", "arrowup": "up", "arrowdown": "down", "page_up": "pageup",
    "page_down": "pagedown", "pgup": "pageup", "pgdn": "pagedown", "option": "alt",
    "caps_lock": "capslock", "back": "backspace",
}
_PLAYWRIGHT_KEYS = {
    "ctrl": "Control", "shift": "Shift", "alt": "Alt", "command": "Meta", "win": "Meta",
    "enter": "Enter", "esc": "Escape", "tab": "Tab", "space": "Space", "backspace": "Backspace",
    "delete": "Delete", "insert": "Insert", "home": "Home", "end": "End", "pageup": "PageUp",
    "pagedown": "PageDown", "left": "ArrowLeft", "right": "ArrowRight", "up": "ArrowUp",
    "down": "ArrowDown", "capslock": "CapsLock", **{f"f{i}": f"F{i}" for i in range(1, 13)},
}
# pyautogui names are the canonical ones above (all are in pyautogui.KEYBOARD_KEYS).


def _canonical_keys(combo: str) -> list[str]:
    keys = [_KEY_ALIASES.get(k.lower(), k.lower() if len(k) > 1 else k) for k in combo.split()]
    if not keys:
        raise UnsupportedAction(f"empty hotkey {combo!r}")
    for k in keys:
        if len(k) > 1 and k not in _PLAYWRIGHT_KEYS:
            raise UnsupportedAction(f"unknown key {k!r} in hotkey {combo!r}")
    return keys


def playwright_combo(combo: str) -> str:
    """"ctrl shift t" -> "Control+Shift+t" (Playwright's keyboard.press syntax)."""
    return "+".join(_PLAYWRIGHT_KEYS.get(k, k) for k in _canonical_keys(combo))


def _unsupported(action: Any, backend: str) -> UnsupportedAction:
    return UnsupportedAction(
        f"{action.type!r} has no {backend} equivalent; the sandbox must handle it itself")


# ---------------------------------------------------------------- pyautogui


def to_pyautogui(action: Any, width: int, height: int) -> list[Call]:
    """Unified action -> pyautogui calls ``(function name, args, kwargs)``."""
    if action.type in NO_INPUT:
        return []
    if isinstance(action, Click):
        return [("click", to_pixels(action.x, action.y, width, height), {})]
    if isinstance(action, LeftDouble):
        return [("doubleClick", to_pixels(action.x, action.y, width, height), {})]
    if isinstance(action, RightSingle):
        return [("rightClick", to_pixels(action.x, action.y, width, height), {})]
    if isinstance(action, LongPress):
        at = to_pixels(action.x, action.y, width, height)
        return [("mouseDown", at, {"button": "left"}), ("sleep", (LONG_PRESS_S,), {}),
                ("mouseUp", at, {"button": "left"})]
    if isinstance(action, Drag):
        return [("moveTo", to_pixels(action.x1, action.y1, width, height), {}),
                ("dragTo", to_pixels(action.x2, action.y2, width, height),
                 {"duration": DRAG_DURATION_S, "button": "left"})]
    if isinstance(action, Scroll):
        x, y = to_pixels(action.x, action.y, width, height)
        if action.direction in ("up", "down"):
            clicks = SCROLL_CLICKS if action.direction == "up" else -SCROLL_CLICKS
            return [("scroll", (clicks,), {"x": x, "y": y})]
        clicks = SCROLL_CLICKS if action.direction == "right" else -SCROLL_CLICKS
        return [("hscroll", (clicks,), {"x": x, "y": y})]
    if isinstance(action, Type):
        return [("write", (action.content,), {"interval": 0})] if action.content else []
    if isinstance(action, Hotkey):
        keys = _canonical_keys(action.key)
        return [("press", (keys[0],), {})] if len(keys) == 1 else [("hotkey", tuple(keys), {})]
    if isinstance(action, PressEnter):
        return [("press", ("enter",), {})]
    if isinstance(action, PressBack):
        return [("hotkey", ("alt", "left"), {})]
    raise _unsupported(action, "pyautogui")


def apply_pyautogui(module: Any, calls: list[Call]) -> None:
    """Perform ``calls`` on the pyautogui module (or anything with the same functions)."""
    for name, args, kwargs in calls:
        getattr(module, name)(*args, **kwargs)


# ---------------------------------------------------------------- Playwright


def to_playwright(action: Any, width: int, height: int) -> list[Call]:
    """Unified action -> Playwright page calls ``(dotted method path on page, args, kwargs)``."""
    if action.type in NO_INPUT:
        return []
    if isinstance(action, Click):
        return [("mouse.click", to_pixels(action.x, action.y, width, height), {"button": "left"})]
    if isinstance(action, LeftDouble):
        return [("mouse.dblclick", to_pixels(action.x, action.y, width, height), {"button": "left"})]
    if isinstance(action, RightSingle):
        return [("mouse.click", to_pixels(action.x, action.y, width, height), {"button": "right"})]
    if isinstance(action, LongPress):
        return [("mouse.move", to_pixels(action.x, action.y, width, height), {}),
                ("mouse.down", (), {"button": "left"}),
                ("wait_for_timeout", (LONG_PRESS_S * 1000,), {}),
                ("mouse.up", (), {"button": "left"})]
    if isinstance(action, Drag):
        return [("mouse.move", to_pixels(action.x1, action.y1, width, height), {}),
                ("mouse.down", (), {"button": "left"}),
                ("mouse.move", to_pixels(action.x2, action.y2, width, height), {"steps": 10}),
                ("mouse.up", (), {"button": "left"})]
    if isinstance(action, Scroll):
        dx, dy = {"up": (0, -SCROLL_PIXELS), "down": (0, SCROLL_PIXELS),
                  "left": (-SCROLL_PIXELS, 0), "right": (SCROLL_PIXELS, 0)}[action.direction]
        return [("mouse.move", to_pixels(action.x, action.y, width, height), {}),
                ("mouse.wheel", (dx, dy), {})]
    if isinstance(action, Type):
        return [("keyboard.type", (action.content,), {})] if action.content else []
    if isinstance(action, Hotkey):
        return [("keyboard.press", (playwright_combo(action.key),), {})]
    if isinstance(action, PressEnter):
        return [("keyboard.press", ("Enter",), {})]
    if isinstance(action, PressBack):
        return [("go_back", (), {})]
    raise _unsupported(action, "Playwright")


async def apply_playwright(page: Any, calls: list[Call]) -> None:
    """Perform ``calls`` on a Playwright async ``Page``, resolving dotted paths like mouse.click."""
    for path, args, kwargs in calls:
        target = page
        for part in path.split("."):
            target = getattr(target, part)
        await target(*args, **kwargs)
