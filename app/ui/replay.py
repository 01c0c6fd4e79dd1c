"""What the replay draws for one step: the action as shapes in the screenshot's pixels (pure)."""

from __future__ import annotations

import orjson

_POINT = {"click", "left_double", "right_single", "long_press"}


def marker(action_json: str, width: int, height: int) -> dict:
    """``{"kind": point|drag|scroll|text|none, ...}`` in pixels of a ``width`` x ``height`` screen.

    Stored coordinates are normalised to [0, 1] (schemas.actions); a malformed action draws nothing.
    """
    try:
        action = orjson.loads(action_json or "{}")
    except orjson.JSONDecodeError:
        return {"kind": "none", "label": "unreadable action"}
    if not isinstance(action, dict):
        return {"kind": "none", "label": "unreadable action"}
    kind = action.get("type", "")
    try:
        if kind in _POINT:
            return {"kind": "point", "x": action["x"] * width, "y": action["y"] * height, "label": kind}
        if kind == "drag":
            return {"kind": "drag", "x1": action["x1"] * width, "y1": action["y1"] * height,
                    "x2": action["x2"] * width, "y2": action["y2"] * height, "label": "drag"}
        if kind == "scroll":
            return {"kind": "scroll", "x": action["x"] * width, "y": action["y"] * height,
                    "label": f"scroll {action.get('direction', '')}"}
    except (KeyError, TypeError):
        return {"kind": "none", "label": f"{kind} without coordinates"}
    if kind == "type":
        return {"kind": "text", "label": f"type {action.get('content', '')!r}"}
    if kind == "hotkey":
        return {"kind": "text", "label": f"keys {action.get('key', '')}"}
    return {"kind": "text", "label": kind or "no action"}
