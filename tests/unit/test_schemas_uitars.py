"""UI-TARS output parsing (through the ui-tars package) and rendering, across every format."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schemas.actions import (
    CallUser, Click, Drag, FileRead, FileWrite, Finished, Hotkey, LeftDouble, LongPress, OpenApp,
    PressBack, PressEnter, PressHome, RightSingle, Scroll, Shell, Type, Wait,
)
from schemas.uitars import COORD_MODES, grid, parse_output, render_action, render_output, snap_action

from schemas_strategies import ACTIONS

W, H = 1280, 720
# smart_resize(720, 1280) -> 728 x 1288: qwen25vl coordinates are pixels of that image
SW, SH = 1288, 728

PARSE = [
    # (coord_mode, model output, expected action, expected thought)
    ("1000", "Thought: click OK\nAction: click(point='<point>500 250</point>')", Click(x=0.5, y=0.25), "click OK"),
    ("1000", "Thought: t\nAction: click(start_box='(500,250)')", Click(x=0.5, y=0.25), "t"),
    ("1000", "Thought: t\nAction: click(start_box='<|box_start|>(500,250)<|box_end|>')", Click(x=0.5, y=0.25), "t"),
    ("1000", "Thought: t\nAction: click(start_box='(400,200,600,300)')", Click(x=0.5, y=0.25), "t"),
    ("1000", "Action: left_single(start_box='(500, 250)')", Click(x=0.5, y=0.25), ""),
    ("qwen25vl", "Thought: t\nAction: click(point='<point>644 182</point>')", Click(x=644 / SW, y=182 / SH), "t"),
    ("qwen25vl", "Thought: t\nAction: click(start_box='<|box_start|>(644,182)<|box_end|>')",
     Click(x=644 / SW, y=182 / SH), "t"),
    ("1000", "Thought: t\nAction: left_double(point='<point>100 100</point>')", LeftDouble(x=0.1, y=0.1), "t"),
    ("1000", "Thought: t\nAction: right_single(start_box='(100,100)')", RightSingle(x=0.1, y=0.1), "t"),
    ("1000", "Thought: t\nAction: long_press(point='<point>100 100</point>')", LongPress(x=0.1, y=0.1), "t"),
    ("1000", "Thought: t\nAction: drag(start_point='<point>100 200</point>', end_point='<point>300 400</point>')",
     Drag(x1=0.1, y1=0.2, x2=0.3, y2=0.4), "t"),
    ("1000", "Thought: t\nAction: drag(start_box='(100,200)', end_box='(300,400)')", Drag(x1=0.1, y1=0.2, x2=0.3, y2=0.4), "t"),
    ("1000", "Thought: t\nAction: scroll(point='<point>500 500</point>', direction='down')",
     Scroll(x=0.5, y=0.5, direction="down"), "t"),
    ("1000", "Thought: t\nAction: scroll(direction='up')", Scroll(x=0.5, y=0.5, direction="up"), "t"),
    ("1000", "Thought: t\nAction: type(content='it\\'s done\\n')", Type(content="it's done\n"), "t"),
    ("1000", "Thought: t\nAction: type(content='it's done')", Type(content="it's done"), "t"),
    ("1000", "Thought: t\nAction: hotkey(key='ctrl c')", Hotkey(key="ctrl c"), "t"),
    ("1000", "Thought: t\nAction: press(key='enter')", Hotkey(key="enter"), "t"),
    ("1000", "Thought: t\nAction: wait()", Wait(), "t"),
    ("1000", "Thought: all done\nAction: finished(content='42')", Finished(content="42"), "all done"),
    ("1000", "Thought: t\nAction: finished()", Finished(), "t"),
    ("1000", "Thought: t\nAction: call_user()", CallUser(), "t"),
    ("1000", "Thought: t\nAction: press_back()", PressBack(), "t"),
    ("1000", "Thought: t\nAction: press_home()", PressHome(), "t"),
    ("1000", "Thought: t\nAction: press_enter()", PressEnter(), "t"),
    ("1000", "Thought: t\nAction: open_app(app_name='Settings')", OpenApp(app_name="Settings"), "t"),
    ("1000", "Thought: t\nAction: shell(command='ls -la')", Shell(command="ls -la"), "t"),
    ("1000", "Thought: t\nAction: file_read(path='notes.txt')", FileRead(path="notes.txt"), "t"),
    ("1000", "Thought: t\nAction: file_write(path='a.txt', content='x\\ny')", FileWrite(path="a.txt", content="x\ny"), "t"),
    ("1000", "Reflection: r\nAction_Summary: s\nAction: wait()", Wait(), "s"),
    ("1000", "Action_Summary: s\nAction: wait()", Wait(), "s"),
    ("1000", "Thought: multi\nAction: click(start_box='(1,1)')\n\nwait()", Click(x=0.001, y=0.001), "multi"),
]


@pytest.mark.parametrize("mode,text,action,thought", PARSE, ids=[f"{i}-{p[2].type}" for i, p in enumerate(PARSE)])
def test_parse_every_format(mode, text, action, thought):
    out = parse_output(text, W, H, coord_mode=mode)
    assert out.error is None
    assert out.action == action
    assert out.thought == thought


def test_multiple_actions_keep_the_first_and_count_the_rest():
    out = parse_output("Thought: multi\nAction: click(start_box='(1,1)')\n\nwait()", W, H, coord_mode="1000")
    assert out.extra_actions == 1


BAD = [
    # (model output, a fragment the error must contain)
    ("", "empty"),
    ("   ", "empty"),
    ("I will click the button", "no 'Action:'"),
    ("Thought: t\nAction: click(", "missing start_box"),
    ("Thought: t\nAction: click(point='<point>2000 10</point>')", "outside the screen"),
    ("Thought: t\nAction: hover(start_box='(10,10)')", "unknown action type 'hover'"),
    ("Thought: t\nAction: scroll(point='<point>5 5</point>', direction='sideways')", "direction"),
    ("Thought: t\nAction: click(start_box='(a,b)')", "unparseable action"),
    ("Thought: t\nAction: ))((", "unparseable action"),
    ("Thought: t\nAction: open_app()", "app_name"),
    ("Thought: t\nAction: click(start_box='(1,2,3)')", "2 or 4 numbers"),
]


@pytest.mark.parametrize("text,fragment", BAD)
def test_unparseable_output_is_data_not_an_exception(text, fragment, capsys):
    for mode in COORD_MODES:
        out = parse_output(text, W, H, coord_mode=mode)
        assert out.action is None
        assert fragment in out.error
    assert capsys.readouterr().out == ""  # their parser's print()s do not leak


def test_bad_arguments_are_errors_too():
    assert "coord_mode" in parse_output("Action: wait()", W, H, coord_mode="pixels").error
    assert parse_output(None, W, H).error == "empty model output"
    # smart_resize refuses aspect ratios over 200
    assert "aspect ratio" in parse_output("Action: click(start_box='(1,1)')", 10000, 10).error


def test_thought_is_kept_when_only_the_action_is_bad():
    out = parse_output("Thought: look here\nAction: hover(start_box='(10,10)')", W, H, coord_mode="1000")
    assert (out.thought, out.action) == ("look here", None)


def test_render_forms():
    a = Click(x=0.5, y=0.25)
    assert render_action(a, W, H, "1000") == "click(point='<point>500 250</point>')"
    assert render_action(a, W, H, "1000", style="box") == "click(start_box='(500,250)')"
    assert render_action(a, W, H, "1000", style="box_token") == "click(start_box='<|box_start|>(500,250)<|box_end|>')"
    assert render_action(a, W, H, "qwen25vl") == "click(point='<point>644 182</point>')"
    assert render_action(Drag(x1=0.1, y1=0.2, x2=0.3, y2=0.4), W, H, "1000") == \
        "drag(start_point='<point>100 200</point>', end_point='<point>300 400</point>')"
    assert render_action(Type(content="it's\n"), W, H) == "type(content='it\\'s\\n')"
    assert render_output("go", a, W, H, "1000") == "Thought: go\nAction: click(point='<point>500 250</point>')"
    assert render_output("", "wait()") == "Action: wait()"


def test_grid():
    assert grid(W, H, "qwen25vl") == grid(W, H, "qwen25vl", factor=7)
    assert (grid(W, H, "qwen25vl").width_units, grid(W, H, "qwen25vl").height_units) == (SW, SH)
    assert grid(W, H, "1000").width_units == 1000


# Their parser lstrips every string argument, so leading whitespace cannot round-trip.
def _no_leading_space(a):
    return all(getattr(a, f) == getattr(a, f).lstrip() for f in ("content", "key", "app_name", "command", "path")
               if hasattr(a, f))


screens = st.tuples(st.integers(16, 4000), st.integers(16, 4000)).filter(lambda s: max(s) / min(s) < 200)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(ACTIONS.filter(_no_leading_space), screens, st.sampled_from(COORD_MODES),
       st.sampled_from(["point", "box", "box_token"]))
def test_render_parse_round_trip(action, screen, mode, style):
    w, h = screen
    snapped = snap_action(action, w, h, mode)
    text = render_output("thinking", render_action(action, w, h, mode, style=style))
    out = parse_output(text, w, h, coord_mode=mode)
    assert out.error is None, (text, out.error)
    assert out.action == snapped
    assert out.thought == "thinking"
    # on the grid the round trip is exact, and rendering is stable
    again = parse_output(render_output("", snapped, w, h, mode, style=style), w, h, coord_mode=mode)
    assert again.action == snapped
    assert render_action(snapped, w, h, mode, style=style) == render_action(action, w, h, mode, style=style)


_THOUGHT_BREAKERS = ("Action: ", "point=", "<point>", "[EOS]", "<|box_start|>", "<|box_end|>")  # the parser strips the box tokens everywhere (UI-TARS-1.5 writes them round points)


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=60).filter(lambda t: not any(b in t for b in _THOUGHT_BREAKERS)))
def test_thought_round_trip(thought):
    out = parse_output(render_output(thought, "wait()"), W, H)
    assert out.action == Wait()
    assert out.thought == thought.strip()


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200), st.sampled_from(COORD_MODES))
def test_parse_never_raises_on_arbitrary_text(text, mode):
    out = parse_output(text, W, H, coord_mode=mode)
    assert (out.action is None) != (out.error is None)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("Action: click(start_box='<point>1 2</point>')\n\\,0123456789")), max_size=80))
def test_parse_never_raises_on_near_miss_text(text):
    out = parse_output("Action: " + text, W, H, coord_mode="1000")
    assert (out.action is None) != (out.error is None)
