"""Desktop tasks: real Debian programs (mousepad, xterm), state-checking verifiers, solvers.

A task is data plus pure functions, registered by name:

- ``params(seed, overrides)``: the episode's parameters (the seed picks the words to type);
- ``instruction(params)``: what the agent is told;
- ``setup(jail, params)``: files written into the episode's working directory before start;
- ``apps(params)``: programs started in the jail, each with the window title that proves it is up;
- ``verify(state, params)``: success from the resulting state (file contents in the jail,
  window titles on the display), never from the actions taken;
- ``solve(params)``: a scripted action sequence that succeeds (the tests prove it does).

Solvers click at fixed points: with no window manager every window opens at the top-left
corner, mousepad at 640x480 and the terminal at the size its ``-geometry`` says, so (0.3, 0.3)
of a 1024x768 screen lies in the text area of either.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from schemas.actions import Click, FileWrite, Hotkey, Type, Wait

WORDS = ("apple", "banana", "cherry", "delta", "echo", "falcon", "granite", "harbor", "island",
         "jasmine", "kernel", "lantern", "meadow", "nebula", "orbit", "pepper", "quartz", "river")
EDITOR = ("mousepad",)
TERMINAL = ("xterm", "-T", "terminal", "-geometry", "100x30+0+0", "-fa", "DejaVu Sans Mono",
            "-fs", "11", "-e", "bash", "--noprofile", "--norc")


@dataclass(frozen=True)
class App:
    argv: tuple[str, ...]
    title: str  # regex a viewable window's title must match once the program is up


@dataclass(frozen=True)
class DesktopState:
    jail: Path
    windows: list[dict]  # {"title", "pid", "x", "y", "width", "height"}, bottom to top

    def read(self, name: str) -> str | None:
        try:
            return (self.jail / name).read_text(errors="replace")
        except OSError:
            return None

    def titles(self) -> list[str]:
        return [w["title"] for w in self.windows]


@dataclass(frozen=True)
class Verdict:
    success: bool
    detail: str


@dataclass(frozen=True)
class DesktopTask:
    name: str
    params: Callable[[int, dict], dict]
    instruction: Callable[[dict], str]
    setup: Callable[[Path, dict], None]
    apps: Callable[[dict], list[App]]
    verify: Callable[[DesktopState, dict], Verdict]
    solve: Callable[[dict], list[Any]]
    needs_windows: bool = False  # verify reads window titles (one extra round trip per step)


DESKTOP_TASKS: dict[str, DesktopTask] = {}


def register_desktop_task(task: DesktopTask) -> DesktopTask:
    DESKTOP_TASKS[task.name] = task
    return task


def get_task(name: str) -> DesktopTask:
    try:
        return DESKTOP_TASKS[name]
    except KeyError:
        raise KeyError(f"unknown desktop task {name!r}; known: {sorted(DESKTOP_TASKS)}") from None


def _words(seed: int, n: int) -> list[str]:
    return random.Random(seed).sample(WORDS, n)


def _lines(text: str | None) -> list[str] | None:
    return None if text is None else text.rstrip("\n").split("\n")


def _saved_editor_window(state: DesktopState, filename: str) -> bool:
    """Mousepad titles a window "<path> - Mousepad" and prefixes "*" while it is unsaved."""
    pattern = re.compile(rf"^[^*].*\b{re.escape(filename)} - Mousepad$")
    return any(pattern.match(t) for t in state.titles())


# ---------------------------------------------------------------- desktop.type-in-editor


def _editor_params(seed: int, overrides: dict) -> dict:
    a, b = _words(seed, 2)
    return {"file": "note.txt", "text": f"{a} {b}", **overrides}


def _editor_verify(state: DesktopState, p: dict) -> Verdict:
    content = state.read(p["file"])
    if content is None:
        return Verdict(False, f"{p['file']} does not exist")
    ok = content.rstrip("\n") == p["text"]
    return Verdict(ok, f"{p['file']} contains {content!r}, expected {p['text']!r}")


register_desktop_task(DesktopTask(
    name="desktop.type-in-editor",
    params=_editor_params,
    instruction=lambda p: f"Type '{p['text']}' into the text editor and save the file.",
    setup=lambda jail, p: (jail / p["file"]).write_text(""),  # opened by name: ctrl+s needs no dialog
    apps=lambda p: [App((*EDITOR, p["file"]), rf"{re.escape(p['file'])} - Mousepad$")],
    verify=_editor_verify,
    solve=lambda p: [Click(x=0.3, y=0.3), Type(content=p["text"]), Hotkey(key="ctrl s")],
))


# ---------------------------------------------------------------- desktop.terminal-echo


def _terminal_verify(state: DesktopState, p: dict) -> Verdict:
    content = state.read(p["file"])
    if content is None:
        return Verdict(False, f"{p['file']} does not exist")
    return Verdict(content.strip() == p["word"], f"{p['file']} contains {content!r}, expected {p['word']!r}")


register_desktop_task(DesktopTask(
    name="desktop.terminal-echo",
    params=lambda seed, o: {"file": "out.txt", "word": _words(seed, 1)[0], **o},
    instruction=lambda p: f"In the terminal, write the word '{p['word']}' into a file named {p['file']}.",
    setup=lambda jail, p: None,
    apps=lambda p: [App(TERMINAL, r"^terminal$")],
    verify=_terminal_verify,
    solve=lambda p: [Click(x=0.3, y=0.3), Type(content=f"echo {p['word']} > {p['file']}\n")],
))


# ---------------------------------------------------------------- desktop.hybrid-append (GUI + SDK)


def _hybrid_verify(state: DesktopState, p: dict) -> Verdict:
    """Both halves: the file holds both lines AND it is open, saved, in the editor."""
    lines = _lines(state.read(p["file"]))
    if lines != [p["first"], p["second"]]:
        return Verdict(False, f"{p['file']} has lines {lines!r}, expected {[p['first'], p['second']]!r}")
    if not _saved_editor_window(state, p["file"]):
        return Verdict(False, f"no saved Mousepad window shows {p['file']}; titles: {state.titles()!r}")
    return Verdict(True, "file written and edited in the editor")


register_desktop_task(DesktopTask(
    name="desktop.hybrid-append",
    params=lambda seed, o: dict(zip(("first", "second"), _words(seed, 2)), file="notes.txt", **o),
    instruction=lambda p: (
        f"Create {p['file']} containing the line '{p['first']}' with the file API. Then open it "
        f"in the mousepad editor from the terminal, add the line '{p['second']}' at the end and save."),
    setup=lambda jail, p: None,
    apps=lambda p: [App(TERMINAL, r"^terminal$")],
    verify=_hybrid_verify,
    solve=lambda p: [
        FileWrite(path=p["file"], content=p["first"] + "\n"),  # SDK half
        Click(x=0.3, y=0.3), Type(content=f"mousepad {p['file']} &\n"),  # GUI half
        Wait(), Wait(), Wait(),  # a cold mousepad start takes up to ~3 s on a loaded machine
        Click(x=0.3, y=0.3), Hotkey(key="ctrl end"), Type(content=p["second"]), Hotkey(key="ctrl s"),
    ],
    needs_windows=True,
))
