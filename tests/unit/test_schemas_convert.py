"""Unified action -> pyautogui / Playwright calls (pure; no display, no browser)."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given
from hypothesis import strategies as st

from schemas.actions import (
    CallUser, Click, Drag, FileRead, FileWrite, Finished, Hotkey, LeftDouble, LongPress, OpenApp,
    PressBack, PressEnter, PressHome, RightSingle, Scroll, Shell, Type, Wait,
)
from schemas.convert import (
    UnsupportedAction, apply_playwright, apply_pyautogui, from_pixels, playwright_combo,
    to_pixels, to_playwright, to_pyautogui,
)

W, H = 1280, 720

PYAUTOGUI = [
    (Click(x=0.5, y=0.5), [("click", (640, 360), {})]),
    (Click(x=1.0, y=1.0), [("click", (1279, 719), {})]),
    (Click(x=0.0, y=0.0), [("click", (0, 0), {})]),
    (LeftDouble(x=0.25, y=0.5), [("doubleClick", (320, 360), {})]),
    (RightSingle(x=0.25, y=0.5), [("rightClick", (320, 360), {})]),
    (LongPress(x=0.5, y=0.5), [("mouseDown", (640, 360), {"button": "left"}), ("sleep", (1.0,), {}),
                               ("mouseUp", (640, 360), {"button": "left"})]),
    (Drag(x1=0.0, y1=0.0, x2=0.5, y2=0.5), [("moveTo", (0, 0), {}),
                                            ("dragTo", (640, 360), {"duration": 0.5, "button": "left"})]),
    (Scroll(x=0.5, y=0.5, direction="down"), [("scroll", (-5,), {"x": 640, "y": 360})]),
    (Scroll(x=0.5, y=0.5, direction="up"), [("scroll", (5,), {"x": 640, "y": 360})]),
    (Scroll(x=0.5, y=0.5, direction="left"), [("hscroll", (-5,), {"x": 640, "y": 360})]),
    (Scroll(x=0.5, y=0.5, direction="right"), [("hscroll", (5,), {"x": 640, "y": 360})]),
    (Type(content="hello\n"), [("write", ("hello\n",), {"interval": 0})]),
    (Type(content=""), []),
    (Hotkey(key="ctrl c"), [("hotkey", ("ctrl", "c"), {})]),
    (Hotkey(key="Control Shift T"), [("hotkey", ("ctrl", "shift", "T"), {})]),
    (Hotkey(key="arrowleft"), [("press", ("left",), {})]),
    (Hotkey(key="enter"), [("press", ("enter",), {})]),
    (PressEnter(), [("press", ("enter",), {})]),
    (PressBack(), [("hotkey", ("alt", "left"), {})]),
    (Wait(), []),
    (Finished(content="done"), []),
    (CallUser(), []),
]

PLAYWRIGHT = [
    (Click(x=0.5, y=0.5), [("mouse.click", (640, 360), {"button": "left"})]),
    (LeftDouble(x=0.5, y=0.5), [("mouse.dblclick", (640, 360), {"button": "left"})]),
    (RightSingle(x=0.5, y=0.5), [("mouse.click", (640, 360), {"button": "right"})]),
    (LongPress(x=0.5, y=0.5), [("mouse.move", (640, 360), {}), ("mouse.down", (), {"button": "left"}),
                               ("wait_for_timeout", (1000.0,), {}), ("mouse.up", (), {"button": "left"})]),
    (Drag(x1=0.0, y1=0.0, x2=1.0, y2=1.0), [("mouse.move", (0, 0), {}), ("mouse.down", (), {"button": "left"}),
                                            ("mouse.move", (1279, 719), {"steps": 10}),
                                            ("mouse.up", (), {"button": "left"})]),
    (Scroll(x=0.5, y=0.5, direction="down"), [("mouse.move", (640, 360), {}), ("mouse.wheel", (0, 500), {})]),
    (Scroll(x=0.5, y=0.5, direction="left"), [("mouse.move", (640, 360), {}), ("mouse.wheel", (-500, 0), {})]),
    (Type(content="abc"), [("keyboard.type", ("abc",), {})]),
    (Hotkey(key="ctrl c"), [("keyboard.press", ("Control+c",), {})]),
    (Hotkey(key="ctrl shift arrowup"), [("keyboard.press", ("Control+Shift+ArrowUp",), {})]),
    (Hotkey(key="space"), [("keyboard.press", ("Space",), {})]),
    (PressEnter(), [("keyboard.press", ("Enter",), {})]),
    (PressBack(), [("go_back", (), {})]),
    (Wait(), []),
    (Finished(), []),
    (CallUser(), []),
]

UNSUPPORTED = [Shell(command="ls"), FileRead(path="a.txt"), FileWrite(path="a.txt", content="x"),
               PressHome(), OpenApp(app_name="Settings"), Hotkey(key="ctrl frobnicate")]


@pytest.mark.parametrize("action,calls", PYAUTOGUI, ids=lambda v: getattr(v, "type", ""))
def test_to_pyautogui(action, calls):
    assert to_pyautogui(action, W, H) == calls


@pytest.mark.parametrize("action,calls", PLAYWRIGHT, ids=lambda v: getattr(v, "type", ""))
def test_to_playwright(action, calls):
    assert to_playwright(action, W, H) == calls


@pytest.mark.parametrize("action", UNSUPPORTED, ids=lambda a: a.type)
def test_unsupported_actions_raise_a_clear_error(action):
    for convert in (to_pyautogui, to_playwright):
        with pytest.raises(UnsupportedAction, match=repr(action.type) if action.type != "hotkey" else "frobnicate"):
            convert(action, W, H)


def test_unsupported_action_is_a_value_error():
    assert issubclass(UnsupportedAction, ValueError)


def test_playwright_combo():
    assert playwright_combo("alt f4") == "Alt+F4"
    assert playwright_combo("cmd a") == "Meta+a"
    assert playwright_combo("ctrl +") == "Control++"


@given(st.integers(1, 8000), st.integers(1, 8000), st.data())
def test_pixels_round_trip_and_stay_on_screen(w, h, data):
    px, py = data.draw(st.integers(0, w - 1)), data.draw(st.integers(0, h - 1))
    assert to_pixels(*from_pixels(px, py, w, h), w, h) == (px, py)
    x, y = data.draw(st.floats(0, 1)), data.draw(st.floats(0, 1))
    qx, qy = to_pixels(x, y, w, h)
    assert 0 <= qx < w and 0 <= qy < h


def test_bad_screen_size():
    with pytest.raises(ValueError):
        to_pixels(0.5, 0.5, 0, 10)


class _Recorder:
    def __init__(self):
        self.calls = []

    def __getattr__(self, name):
        return lambda *a, **k: self.calls.append((name, a, k))


class _AsyncRecorder:
    def __init__(self, log, prefix=""):
        self._log, self._prefix = log, prefix

    def __getattr__(self, name):
        path = f"{self._prefix}{name}"
        if name in ("mouse", "keyboard"):
            return _AsyncRecorder(self._log, path + ".")

        async def call(*a, **k):
            self._log.append((path, a, k))
        return call


def test_apply_pyautogui_calls_module_functions():
    rec = _Recorder()
    calls = to_pyautogui(Drag(x1=0.1, y1=0.1, x2=0.9, y2=0.9), W, H)
    apply_pyautogui(rec, calls)
    assert rec.calls == calls


def test_apply_playwright_resolves_dotted_paths():
    log: list = []
    calls = to_playwright(Drag(x1=0.1, y1=0.1, x2=0.9, y2=0.9), W, H) + to_playwright(PressBack(), W, H)
    asyncio.run(apply_playwright(_AsyncRecorder(log), calls))
    assert log == calls
