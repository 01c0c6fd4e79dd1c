"""How a person plays the multistep suite's tasks, from what the Annotate view shows them.

A routine reads only what is drawn: the instruction and the task page's visible elements
(``Seen``: an element's own text, its look: tag, role and the classes that style it, and where
its box's centre is on the shown screen), never the task's script variables or a solver. Given
what is on screen now it names the element a person would click next, or None (nothing it
recognises: the person gives up, and the recorder ends the episode). Each routine is a pure
function of one screen: the page's state is read again after every click, as a person looks
again after every click.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Seen:
    """One visible element of the task page: its own text (its direct text nodes), its look and
    the centre of its box in the shown screen's pixels (the task area's top left is 0, 0)."""

    text: str
    tag: str
    classes: tuple[str, ...]
    x: float
    y: float
    role: str = ""
    selected: bool = False  # drawn as the open or chosen one (aria-expanded / aria-selected)
    in_query: bool = False  # part of the instruction's box at the top of the task area
    cut: bool = False  # its content shows cut off at its edge (still opening or closing)

    def has(self, cls: str) -> bool:
        return cls in self.classes


Routine = Callable[[str, list[Seen]], "Seen | None"]
QUOTED = re.compile(r'"([^"]+)"')


def quoted(instruction: str) -> str | None:
    """The instruction's last quoted word ("... click on the link "foo"." -> foo)."""
    found = QUOTED.findall(instruction)
    return found[-1] if found else None


def _link_named(name: str, seen: list[Seen]) -> Seen | None:
    """A visible link (drawn as one: the ``alink`` style) reading ``name``."""
    return next((s for s in seen if s.has("alink") and s.text == name and not s.in_query), None)


def _after_open(items: list[Seen]) -> Seen | None:
    """The next of ``items`` after the one drawn open (the first when none is): a person opens
    them in turn until the target shows."""
    if not items:
        return None
    opened = [i for i, s in enumerate(items) if s.selected]
    return items[(opened[0] + 1) % len(items)] if opened else items[0]


def collapsible(instruction: str, seen: list[Seen]) -> Seen | None:
    """click-collapsible-2: the named link if a section shows it; while a section is still
    opening or closing (the page's time moves only when the person acts) a click on the
    instruction, which changes nothing, to see the rest; else the next section header."""
    name = quoted(instruction)
    if name is None:
        return None
    link = _link_named(name, seen)
    if link is not None:
        return link
    if any(s.has("ui-accordion-content") and s.cut for s in seen):
        return next((s for s in seen if s.in_query and s.text), None)
    return _after_open([s for s in seen if s.role == "tab" and s.tag.startswith("h")])


def tabs(instruction: str, seen: list[Seen]) -> Seen | None:
    """click-tab-2 and click-tab-2-hard: the named link if the open tab shows it, else the next tab."""
    name = quoted(instruction)
    if name is None:
        return None
    return _link_named(name, seen) or _after_open([s for s in seen if s.role == "tab" and s.tag == "a"])


def menu_button(instruction: str, seen: list[Seen]) -> Seen | None:
    """click-menu-2: the item labelled as asked (or showing the instruction's icon) if the menu
    shows it; else the submenu that may hold it (Playback); else the "Menu" button."""
    items = [s for s in seen if s.role == "menuitem"]
    if not items:
        return next((s for s in seen if s.tag == "button" and s.text == "Menu"), None)
    target = _menu_target(instruction, seen, items)
    if target is not None:
        return target
    parents = [s for s in items if s.text and _is_parent(s, seen)]
    return parents[0] if parents else None


def _menu_target(instruction: str, seen: list[Seen], items: list[Seen]) -> Seen | None:
    label = quoted(instruction.replace('"Menu"', ""))
    if label is not None:
        return next((s for s in items if s.text == label), None)
    icon = next((c for s in seen if s.in_query for c in s.classes if c.startswith("ui-icon-")), None)
    if icon is None:
        return None
    drawn = next((s for s in seen if not s.in_query and s.has(icon)), None)  # the icon in the menu
    if drawn is None:
        return None
    # the item on the icon's line, the nearest one (an open submenu has items on the same lines)
    return min((s for s in items if s.text and abs(s.y - drawn.y) < 6), key=lambda s: abs(s.x - drawn.x), default=None)


def _is_parent(item: Seen, seen: list[Seen]) -> bool:
    """An item drawn with a submenu's caret on its line."""
    return any(s.has("ui-menu-icon") and abs(s.y - item.y) < 6 for s in seen)


def email_trash(instruction: str, seen: list[Seen]) -> Seen | None:
    """email-inbox-delete: the trash icon on the named sender's line of the inbox."""
    found = re.search(r"email by (.+?) and click", instruction)
    if found is None:
        return None
    sender = next((s for s in seen if s.has("email-sender") and s.text == found.group(1).strip()), None)
    if sender is None:
        return None
    bins = [s for s in seen if s.has("trash")]
    return min(bins, key=lambda s: abs(s.y - sender.y), default=None)


ROUTINES: dict[str, Routine] = {
    "click-collapsible-2": collapsible,
    "click-tab-2": tabs,
    "click-tab-2-hard": tabs,
    "click-menu-2": menu_button,
    "email-inbox-delete": email_trash,
}


def routine_for(task: str) -> Routine:
    """The person's routine for ``task``; KeyError naming the tasks that have one."""
    if task not in ROUTINES:
        raise KeyError(f"no person-like routine for {task!r}: {', '.join(sorted(ROUTINES))} have one")
    return ROUTINES[task]
