"""The recorder's person-like routines (app.ui.record_routines): from one screen's visible
elements they name what a person clicks next."""

from __future__ import annotations

import pytest

from app.ui.record_routines import ROUTINES, Seen, quoted, routine_for


def s(text="", tag="span", classes=(), x=10.0, y=10.0, **kw) -> Seen:
    return Seen(text=text, tag=tag, classes=tuple(classes), x=x, y=y, **kw)


QUERY = s('Switch between the tabs to find and click on the link "eget".', tag="div", in_query=True)


def tab(n: int, selected=False) -> Seen:
    return s(f"Tab #{n}", tag="a", x=30.0 * n, y=70, role="tab", selected=selected)


def test_quoted_reads_the_last_quoted_word():
    assert quoted('Click the "Menu" button, and then ... labeled "Zoom In".') == "Zoom In"
    assert quoted("no quotes here") is None


def test_tabs_click_the_named_link_when_shown_else_the_tab_after_the_open_one():
    routine = routine_for("click-tab-2")
    other = s("eget", x=50, y=120)  # the word in plain text is not the link
    assert routine(QUERY.text, [QUERY, tab(1, True), tab(2), tab(3), other]) == tab(2)
    assert routine(QUERY.text, [QUERY, tab(1), tab(2), tab(3, True)]) == tab(1)  # round again
    link = s("eget", classes=("alink",), x=80, y=150)
    assert routine(QUERY.text, [QUERY, tab(1, True), tab(2), link]) == link
    assert routine("no target named", [tab(1)]) is None


def test_collapsible_waits_on_a_section_still_opening_then_opens_the_next():
    q = s('Expand the sections below, to find and click on the link "eget".', tag="div", in_query=True)
    headers = [s(f"Section #{i}", tag="h3", y=60.0 + 20 * i, role="tab", selected=(i == 1)) for i in (1, 2, 3)]
    opening = s("words", tag="div", classes=("ui-accordion-content",), cut=True)
    routine = routine_for("click-collapsible-2")
    assert routine(q.text, [q, *headers, opening]) == q  # a click on the instruction changes nothing
    shown = s("words", tag="div", classes=("ui-accordion-content",))
    assert routine(q.text, [q, *headers, shown]) == headers[1]
    link = s("eget", classes=("alink",), y=90)
    assert routine(q.text, [q, *headers, opening, link]) == link


def test_menu_opens_the_menu_then_its_submenu_then_the_item_by_label_or_icon():
    routine = routine_for("click-menu-2")
    button = s("Menu", tag="button", x=30, y=175)
    by_label = 'Click the "Menu" button, and then find and click on the item labeled "Play".'
    assert routine(by_label, [button]) == button
    save = s("Save", tag="div", classes=("ui-menu-item-wrapper",), x=42, y=64, role="menuitem")
    playback = s("Playback", tag="div", classes=("ui-menu-item-wrapper",), x=42, y=81, role="menuitem")
    caret = s("", classes=("ui-menu-icon", "ui-icon"), x=70, y=81, role="menuitem")
    assert routine(by_label, [button, save, playback, caret]) == playback
    play = s("Play", tag="div", classes=("ui-menu-item-wrapper",), x=120, y=64, role="menuitem")
    assert routine(by_label, [button, save, playback, caret, play]) == play
    by_icon = "Click the \"Menu\" button, and then find and click on the item with the icon."
    icon_q = s("", classes=("ui-icon", "ui-icon-disk"), in_query=True)
    disk = s("", classes=("ui-icon", "ui-icon-disk"), x=16, y=64, role="menuitem")
    # the Save line, not the open submenu's Play on the same line
    assert routine(by_icon, [icon_q, button, save, playback, caret, play, disk]) == save


def test_email_trash_on_the_senders_line():
    routine = routine_for("email-inbox-delete")
    ask = "Find the email by Lyda and click the trash icon to delete it."
    rows = [(s("Alice", classes=("email-sender",), y=50), s(classes=("trash",), x=140, y=52)),
            (s("Lyda", classes=("email-sender",), y=90), s(classes=("trash",), x=140, y=92))]
    seen = [e for row in rows for e in row]
    assert routine(ask, seen) == rows[1][1]
    assert routine(ask.replace("Lyda", "Bob"), seen) is None  # not on screen: the person gives up


def test_a_task_without_a_routine_is_refused_by_name():
    with pytest.raises(KeyError, match="click-tab-2"):
        routine_for("tic-tac-toe")
    assert len(ROUTINES) >= 4
