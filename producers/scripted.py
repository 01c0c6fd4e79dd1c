"""Scripted MiniWoB++ solvers: pure functions of the instruction and a DOM snapshot.

They prove the browser sandbox end to end (a scripted policy must reach reward > 0), give tests a
deterministic policy, and play the annotators of the cold start (UI-TARS-2): their episodes go
through the normal pipeline into flywheel.sft.v1 as demonstrations for behaviour cloning. Every
solver of the default suite (producers.suites) is here. The snapshot comes from ``DOM_PROBE_JS``
evaluated on the task page: every visible element under ``#area`` with its rectangle relative to
the task area (``#wrap``), text, value, focus, checked state, class and scroll position.
Coordinates returned are normalised to the task area.

The games' heuristic players (producers.games) are solvers here too: they read the board the game
page reports (``flywheelGame.board()``), which the probe carries as ``game``.

Solvers are stateless: where a task needs memory, the page holds it (a clicked button keeps the
focus, a ticked box stays ticked, a field keeps its value), so each state maps to one action and
a demonstration never depends on how it got there. They only emit actions the multi-turn pixel
policy can represent (clicks at element centres, typed texts copied from the instruction, scroll).
"""

from __future__ import annotations

import re
from typing import Any, Callable

from producers.games import GAMES
from schemas.actions import Click, Scroll, Type, Wait

DOM_PROBE_JS = """(() => {
  const wrap = document.getElementById('wrap').getBoundingClientRect();
  const out = [];
  for (const el of document.querySelectorAll('#area *')) {
    const r = el.getBoundingClientRect();
    if (r.width === 0 || r.height === 0) continue;
    out.push({tag: el.tagName.toLowerCase(), id: el.id || '', text: (el.textContent || '').trim(),
              value: el.value === undefined ? null : String(el.value), focused: document.activeElement === el,
              checked: el.checked === true, cls: String(el.className || ''), input: el.type || '',
              scroll: [el.scrollTop, el.scrollHeight, el.clientHeight],
              x: r.x - wrap.x, y: r.y - wrap.y, w: r.width, h: r.height});
  }
  const game = window.flywheelGame ? window.flywheelGame.board() : null;
  return {width: wrap.width, height: wrap.height, elements: out, game: game};
})()"""

Solver = Callable[[str, dict[str, Any]], Any]
_THOUGHTS = {
    "click": "The instruction's target is on the screen: I click it.",
    "left_double": "The instruction's target is on the screen: I double-click it.",
    "right_single": "The instruction's target is on the screen: I right-click it.",
    "long_press": "The instruction's target is on the screen: I press and hold it.",
    "drag": "The instruction asks for something moved: I drag it where it goes.",
    "scroll": "What the instruction asks for is out of sight: I scroll {direction} to it.",
    "type": "The field is focused and the instruction gives its text: I type {content!r}.",
    "hotkey": "The instruction is carried out with a key: I press {key}.",
    "press_enter": "The form is filled in: I press Enter to submit it.",
    "wait": "Nothing on the screen to act on yet: I wait for the page.",
    "finished": "Everything the instruction asks for is done: I finish.",
    "shell": "The instruction needs a command run: I run it in the shell.",
    "file_read": "The instruction needs what a file holds: I read it.",
    "file_write": "The instruction asks for a file's contents: I write them.",
}


def thought(action: Any) -> str:
    """The Thought the scripted solvers write before ``action``: what they do and why, in terms of
    the screen and the instruction, never the task's name (a policy cloned from them would learn to
    name the task it must infer). On their demonstrations (the cold start a language policy is
    cloned from) and on the annotator's side of its reflection pairs: one function, so such a pair
    differs from what the policy learnt to write only where the annotator corrects it."""
    kind = "wait" if action is None else action.type
    text = _THOUGHTS.get(kind, "The instruction asks for it: I " + kind.replace("_", " ") + ".")
    return text.format(**(action.model_dump() if action is not None else {}))


SOLVERS: dict[str, Solver] = {}


def solver(*names: str):
    def deco(fn: Solver) -> Solver:
        for n in names:
            SOLVERS[n] = fn
        return fn
    return deco


def click_on(el: dict[str, Any], dom: dict[str, Any]) -> Click:
    """Click the centre of ``el`` (normalised to the task area); a text field near its left end,
    where it looks different from its middle (a demonstration a convolutional policy can copy:
    the centre of a long uniform box is not visible locally)."""
    dx = min(el["w"] / 2, 12.0) if el.get("tag") == "input" and el.get("input") in ("text", "password") else el["w"] / 2
    x = (el["x"] + dx) / dom["width"]
    y = (el["y"] + el["h"] / 2) / dom["height"]
    return Click(x=min(max(x, 0.0), 1.0), y=min(max(y, 0.0), 1.0))


def find(dom: dict[str, Any], **match: Any) -> dict[str, Any] | None:
    for el in dom["elements"]:
        if all(el.get(k) == v for k, v in match.items()):
            return el
    return None


def quoted(instruction: str) -> str | None:
    m = re.search(r'"([^"]*)"', instruction)
    return m.group(1) if m else None


@solver("click-test")
def solve_click_test(instruction: str, dom: dict[str, Any]) -> Any:
    el = find(dom, id="subbtn")
    return click_on(el, dom) if el else Wait()


@solver("click-test-2")
def solve_click_test_2(instruction: str, dom: dict[str, Any]) -> Any:
    """ONE at the point of it nearest its centre that TWO (drawn later, on top) does not cover:
    the two 40 px buttons are placed at random and overlap in about 1 episode of 4."""
    one, two = find(dom, id="subbtn"), find(dom, id="subbtn2")
    if one is None:
        return Wait()
    if two is None:
        return click_on(one, dom)
    cx, cy = one["x"] + one["w"] / 2, one["y"] + one["h"] / 2
    points = [(one["x"] + one["w"] * (i + 0.5) / 8, one["y"] + one["h"] * (j + 0.5) / 8) for i in range(8) for j in range(8)]
    free = [(x, y) for x, y in points if not (two["x"] <= x <= two["x"] + two["w"] and two["y"] <= y <= two["y"] + two["h"])]
    if not free:
        return Wait()
    x, y = min(free, key=lambda p: (p[0] - cx) ** 2 + (p[1] - cy) ** 2)
    return Click(x=min(max(x / dom["width"], 0.0), 1.0), y=min(max(y / dom["height"], 0.0), 1.0))


@solver("click-button")
def solve_click_button(instruction: str, dom: dict[str, Any]) -> Any:
    want = quoted(instruction)
    el = find(dom, tag="button", text=want) if want is not None else None
    return click_on(el, dom) if el else Wait()


def all_quoted(instruction: str) -> list[str]:
    return re.findall(r'"([^"]*)"', instruction)


def inside(inner: dict[str, Any], outer: dict[str, Any]) -> bool:
    cx, cy = inner["x"] + inner["w"] / 2, inner["y"] + inner["h"] / 2
    return outer["x"] <= cx <= outer["x"] + outer["w"] and outer["y"] <= cy <= outer["y"] + outer["h"]


def fill_then_submit(dom: dict[str, Any], fields: list[tuple[str, str]], submit_id: str = "subbtn") -> Any:
    """Fill each (field id, text) in order - click it, then type - and click submit at the end."""
    for field_id, text in fields:
        field = find(dom, id=field_id)
        if field is None:
            return Wait()
        if field["value"] != text:
            return Type(content=text) if field["focused"] else click_on(field, dom)
    submit = find(dom, id=submit_id)
    return click_on(submit, dom) if submit else Wait()


@solver("enter-text")
def solve_enter_text(instruction: str, dom: dict[str, Any]) -> Any:
    want = quoted(instruction)
    return Wait() if want is None else fill_then_submit(dom, [("tt", want)])


@solver("enter-password")
def solve_enter_password(instruction: str, dom: dict[str, Any]) -> Any:
    want = quoted(instruction)
    return Wait() if want is None else fill_then_submit(dom, [("password", want), ("verify", want)])


@solver("login-user")
def solve_login_user(instruction: str, dom: dict[str, Any]) -> Any:
    texts = all_quoted(instruction)
    if len(texts) < 2:
        return Wait()
    return fill_then_submit(dom, [("username", texts[0]), ("password", texts[1])])


@solver("click-button-sequence")
def solve_click_button_sequence(instruction: str, dom: dict[str, Any]) -> Any:
    # ONE (subbtn) then TWO (subbtn2): a clicked button keeps the focus, the page's memory
    one, two = find(dom, id="subbtn"), find(dom, id="subbtn2")
    if one is None or two is None:
        return Wait()
    return click_on(two if one["focused"] else one, dom)


@solver("focus-text-2")
def solve_focus_text_2(instruction: str, dom: dict[str, Any]) -> Any:
    m = re.search(r"(\d)(?:st|nd|rd|th)", instruction)
    el = find(dom, id=f"tt{m.group(1)}") if m else None
    return click_on(el, dom) if el else Wait()


@solver("click-collapsible")
def solve_click_collapsible(instruction: str, dom: dict[str, Any]) -> Any:
    opened = any("ui-accordion-content" in el["cls"] for el in dom["elements"])
    target = find(dom, id="subbtn") if opened else find(dom, tag="h3")
    return click_on(target, dom) if target else Wait()


def _choice_inputs(dom: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any] | None]]:
    """(label, the checkbox / radio inside it) pairs."""
    inputs = [el for el in dom["elements"] if el["tag"] == "input"]
    return [(lab, next((i for i in inputs if inside(i, lab)), None)) for lab in dom["elements"] if lab["tag"] == "label"]


@solver("click-option")
def solve_click_option(instruction: str, dom: dict[str, Any]) -> Any:
    m = re.match(r"Select (.*) and click Submit", instruction)
    for label, box in _choice_inputs(dom):
        if m and label["text"] == m.group(1) and box is not None and not box["checked"]:
            return click_on(box, dom)
    submit = find(dom, id="subbtn")
    return click_on(submit, dom) if submit else Wait()


@solver("click-checkboxes")
def solve_click_checkboxes(instruction: str, dom: dict[str, Any]) -> Any:
    m = re.match(r"Select (.*) and click Submit", instruction)
    wanted = set() if not m or m.group(1) == "nothing" else set(m.group(1).split(", "))
    for label, box in _choice_inputs(dom):  # one box per step, top to bottom
        if box is not None and (label["text"] in wanted) != box["checked"]:
            return click_on(box, dom)
    submit = find(dom, id="subbtn")
    return click_on(submit, dom) if submit else Wait()


@solver("use-spinner")
def solve_use_spinner(instruction: str, dom: dict[str, Any]) -> Any:
    m = re.search(r"Select (-?\d+) with", instruction)
    field = find(dom, id="spinner")
    if not m or field is None:
        return Wait()
    want, value = int(m.group(1)), int(field["value"] or 0)
    if value == want:
        return click_on(find(dom, id="subbtn"), dom)
    arrow = "ui-spinner-up" if value < want else "ui-spinner-down"
    el = next((e for e in dom["elements"] if e["tag"] == "a" and arrow in e["cls"]), None)
    return click_on(el, dom) if el else Wait()


@solver("scroll-text-2")
def solve_scroll_text_2(instruction: str, dom: dict[str, Any]) -> Any:
    area, submit = find(dom, id="text-area"), find(dom, id="subbtn")
    if area is None or submit is None:
        return Wait()
    top, height, client = area["scroll"]
    at = click_on(area, dom)
    if "bottom" in instruction and top + client < height - 5:
        return Scroll(x=at.x, y=at.y, direction="down")
    if "top" in instruction and top > 5:
        return Scroll(x=at.x, y=at.y, direction="up")
    return click_on(submit, dom)


def _game_solver(player: Callable[[dict[str, Any]], Any]) -> Solver:
    def solve_game(instruction: str, dom: dict[str, Any]) -> Any:
        return player(dom["game"]) if dom.get("game") else Wait()
    return solve_game


for _game in GAMES.values():
    solver(_game.name)(_game_solver(_game.player))


def has_solver(task_name: str) -> bool:
    return task_name in SOLVERS


def solve(task_name: str, instruction: str, dom: dict[str, Any]) -> Any:
    """The scripted action for this state; ``Wait`` for tasks without a solver."""
    fn = SOLVERS.get(task_name)
    return fn(instruction, dom) if fn else Wait()
