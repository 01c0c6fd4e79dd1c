"""Per-display executor: a child process that owns pyautogui and the screenshots of ONE display.

Why a process per sandbox: pyautogui (through python-xlib and mouseinfo) opens its X
connection from ``$DISPLAY`` when it is first imported, once per interpreter, and Pillow's X
grab authenticates with ``$XAUTHORITY`` from the environment. Several sandboxes in one worker
each need their own display and cookie, so each gets a child started with its own
DISPLAY/XAUTHORITY; the parent never imports pyautogui. A crash of the X server kills only this
child, which the parent sees as a closed pipe (-> ``SandboxCrashed``), and a hung server shows
up as a reply that never comes (the parent's timeout -> ``SandboxCrashed``).

Protocol on the child's stdin/stdout: one JSON request per line; the reply is one JSON line,
followed by ``nbytes`` raw bytes when it says so (screenshots: packed RGB, row-major). Replies
are ``{"ok": true, ...}``, ``{"ok": false, "error": ...}`` for an action the display refused
(an unknown key, a character it cannot type), or ``{"fatal": ...}`` before the child exits
because the display itself failed.

Run as ``python -m producers.sandboxes.x_executor`` with DISPLAY and XAUTHORITY set.
"""

from __future__ import annotations

import json
import os
import sys
import time

# the only pyautogui functions a converted action may call (schemas.convert.to_pyautogui)
ALLOWED_CALLS = frozenset({
    "click", "doubleClick", "rightClick", "mouseDown", "mouseUp", "moveTo", "dragTo", "scroll",
    "hscroll", "write", "press", "hotkey", "sleep", "keyDown", "keyUp",
})


class ActionRefused(Exception):
    """The display cannot perform this call; reported on the step, the episode goes on."""


def _check_typable(pyautogui, text: str) -> None:
    mapping = pyautogui._pyautogui_x11.keyboardMapping
    bad = sorted({c for c in text if c not in mapping or mapping[c] is None})
    if bad:
        raise ActionRefused(f"cannot type characters {bad!r} on this display (no keysym)")


def run_calls(pyautogui, calls: list) -> None:
    for name, args, kwargs in calls:
        if name not in ALLOWED_CALLS:
            raise ActionRefused(f"pyautogui call {name!r} is not allowed")
        if name == "write":
            _check_typable(pyautogui, args[0])
        if name in ("press", "hotkey", "keyDown", "keyUp"):
            mapping = pyautogui._pyautogui_x11.keyboardMapping
            unknown = [k for k in args if mapping.get(k) is None]
            if unknown:
                raise ActionRefused(f"key(s) {unknown!r} have no keysym on this display")
        try:
            getattr(pyautogui, name)(*args, **kwargs)
        except (pyautogui.PyAutoGUIException, ValueError, TypeError) as e:
            raise ActionRefused(f"pyautogui.{name} refused: {e}") from None


def grab_stable(grab, settle_ms: float, max_ms: float):
    """Screenshot once the screen stopped changing: two equal grabs ``settle_ms`` apart."""
    deadline = time.monotonic() + max_ms / 1000
    time.sleep(settle_ms / 1000)
    prev = grab().tobytes()
    while True:
        time.sleep(settle_ms / 1000)
        image = grab()
        data = image.tobytes()
        if data == prev or time.monotonic() >= deadline:
            return image, data
        prev = data


def list_windows(display) -> list[dict]:
    """Viewable top-level windows (no window manager: they are the root's children)."""
    from Xlib import X

    net_name = display.intern_atom("_NET_WM_NAME")
    net_pid = display.intern_atom("_NET_WM_PID")
    utf8 = display.intern_atom("UTF8_STRING")
    out = []
    for win in display.screen().root.query_tree().children:
        attrs = win.get_attributes()
        if attrs.map_state != X.IsViewable:
            continue
        prop = win.get_full_property(net_name, utf8)
        title = prop.value if prop else (win.get_wm_name() or "")
        if isinstance(title, bytes):  # python-xlib returns str or bytes depending on the type
            title = title.decode("utf-8", "replace")
        pid = win.get_full_property(net_pid, X.AnyPropertyType)
        geo = win.get_geometry()
        out.append({"id": win.id, "title": title, "pid": int(pid.value[0]) if pid else None,
                    "x": geo.x, "y": geo.y, "width": geo.width, "height": geo.height})
    return out


def kill_clients(display) -> int:
    """XKillClient every client that owns a top-level window: clears the screen between episodes."""
    children = display.screen().root.query_tree().children
    for win in children:
        win.kill_client()
    display.sync()
    return len(children)


def main() -> int:
    out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)  # anything a library prints goes to stderr, never into the protocol stream
    sys.stdout = sys.stderr
    import pyautogui
    from PIL import ImageGrab
    from Xlib import display as xdisplay

    pyautogui.PAUSE = 0  # the sandbox settles after the whole action, not after every call
    pyautogui.FAILSAFE = False  # a click in a screen corner is a legal action here
    name = os.environ["DISPLAY"]
    dpy = xdisplay.Display(name)

    def grab():
        return ImageGrab.grab(xdisplay=name)

    def reply(msg: dict, payload: bytes = b"") -> None:
        out.write(json.dumps({**msg, "nbytes": len(payload)}).encode() + b"\n" + payload)

    for line in sys.stdin.buffer:
        req = json.loads(line)
        op = req["op"]
        try:
            if op == "calls":
                run_calls(pyautogui, req["calls"])
                dpy.sync()
                reply({"ok": True})
            elif op == "screenshot":
                image, data = grab_stable(grab, req.get("settle_ms", 30), req.get("max_ms", 1000))
                reply({"ok": True, "width": image.width, "height": image.height}, data)
            elif op == "windows":
                reply({"ok": True, "windows": list_windows(dpy)})
            elif op == "kill_clients":
                reply({"ok": True, "killed": kill_clients(dpy)})
            elif op == "ping":
                dpy.get_input_focus()  # a round trip: proves the server answers
                reply({"ok": True})
            else:
                reply({"ok": False, "error": f"unknown op {op!r}"})
        except ActionRefused as e:
            reply({"ok": False, "error": str(e)})
        except Exception as e:  # the display itself failed: tell the parent, then die
            reply({"fatal": f"{type(e).__name__}: {e}"})
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
