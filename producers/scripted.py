"""Scripted MiniWoB++ solvers: pure functions of the instruction and a DOM snapshot.

They prove the browser sandbox end to end (a scripted policy must reach reward > 0) and give
tests a deterministic policy. The snapshot comes from ``DOM_PROBE_JS`` evaluated on the task
page: every visible element under ``#area`` with its rectangle relative to the task area
(``#wrap``), text, value and focus. Coordinates returned are normalised to the task area.
"""

from __future__ import annotations

import re
from typing import Any, Callable

from schemas.actions import Click, Type, Wait

DOM_PROBE_JS = """(() => {
  const wrap = document.getElementById('wrap').getBoundingClientRect();
  const out = [];
  for (const el of document.querySelectorAll('#area *')) {
    const r = el.getBoundingClientRect();
    if (r.width === 0 || r.height === 0) continue;
    out.push({tag: el.tagName.toLowerCase(), id: el.id || '', text: (el.textContent || '').trim(),
              value: el.value === undefined ? null : String(el.value), focused: document.activeElement === el,
              x: r.x - wrap.x, y: r.y - wrap.y, w: r.width, h: r.height});
  }
  return {width: wrap.width, height: wrap.height, elements: out};
})()"""

Solver = Callable[[str, dict[str, Any]], Any]
SOLVERS: dict[str, Solver] = {}


def solver(*names: str):
    def deco(fn: Solver) -> Solver:
        for n in names:
            SOLVERS[n] = fn
        return fn
    return deco


def click_on(el: dict[str, Any], dom: dict[str, Any]) -> Click:
    """Click the centre of ``el`` (normalised to the task area)."""
    x = (el["x"] + el["w"] / 2) / dom["width"]
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


@solver("click-test", "click-test-2")
def solve_click_test(instruction: str, dom: dict[str, Any]) -> Any:
    el = find(dom, id="subbtn")
    return click_on(el, dom) if el else Wait()


@solver("click-button")
def solve_click_button(instruction: str, dom: dict[str, Any]) -> Any:
    want = quoted(instruction)
    el = find(dom, tag="button", text=want) if want is not None else None
    return click_on(el, dom) if el else Wait()


@solver("enter-text")
def solve_enter_text(instruction: str, dom: dict[str, Any]) -> Any:
    want = quoted(instruction)
    field, submit = find(dom, id="tt"), find(dom, id="subbtn")
    if want is None or field is None or submit is None:
        return Wait()
    if field["value"] == want:
        return click_on(submit, dom)
    if not field["focused"]:
        return click_on(field, dom)
    return Type(content=want)


def solve(task_name: str, instruction: str, dom: dict[str, Any]) -> Any:
    """The scripted action for this state; ``Wait`` for tasks without a solver."""
    fn = SOLVERS.get(task_name)
    return fn(instruction, dom) if fn else Wait()
