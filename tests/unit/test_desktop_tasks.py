"""Desktop task verifiers and solvers as pure functions (the e2e tests run them on a display)."""

from __future__ import annotations

import pytest
from pydantic import TypeAdapter

from producers.sandboxes.desktop_tasks import DESKTOP_TASKS, DesktopState, get_task
from schemas.actions import SDK_ACTIONS, Action

_ACTION = TypeAdapter(Action)


def state(tmp_path, files: dict[str, str], titles: tuple[str, ...] = ()) -> DesktopState:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    return DesktopState(tmp_path, [{"title": t, "pid": None, "x": 0, "y": 0, "width": 1, "height": 1}
                                   for t in titles])


def test_at_least_three_tasks_and_one_needs_gui_and_sdk():
    assert len(DESKTOP_TASKS) >= 3
    hybrid = [t for t in DESKTOP_TASKS.values()
              if {a.type in SDK_ACTIONS for a in t.solve(t.params(0, {}))} == {True, False}]
    assert [t.name for t in hybrid] == ["desktop.hybrid-append"]


@pytest.mark.parametrize("name", sorted(DESKTOP_TASKS))
def test_params_are_seeded_and_solvers_emit_valid_actions(name):
    task = get_task(name)
    assert task.params(3, {}) == task.params(3, {})
    params = task.params(3, {})
    assert task.instruction(params)
    for action in task.solve(params):
        assert _ACTION.validate_python(action.model_dump()) == action
    assert task.apps(params)


def test_unknown_task_names_the_known_ones():
    with pytest.raises(KeyError, match="desktop.type-in-editor"):
        get_task("desktop.nope")


def test_editor_verifier(tmp_path):
    task = get_task("desktop.type-in-editor")
    p = task.params(0, {"text": "hello world"})
    assert task.verify(state(tmp_path, {"note.txt": "hello world\n"}), p).success
    assert not task.verify(state(tmp_path, {"note.txt": "hello"}), p).success
    assert not task.verify(state(tmp_path, {}), {**p, "file": "absent.txt"}).success


def test_terminal_verifier(tmp_path):
    task = get_task("desktop.terminal-echo")
    p = task.params(0, {"word": "orbit"})
    assert task.verify(state(tmp_path, {"out.txt": "orbit\n"}), p).success
    assert not task.verify(state(tmp_path, {"out.txt": "echo orbit\n"}), p).success


def test_hybrid_verifier_needs_the_file_and_the_saved_editor_window(tmp_path):
    task = get_task("desktop.hybrid-append")
    p = task.params(0, {"first": "a", "second": "b"})
    saved = "/home/agent/work/notes.txt - Mousepad"
    assert task.verify(state(tmp_path, {"notes.txt": "a\nb\n"}, ("terminal", saved)), p).success
    # the SDK alone (no editor window) is not enough
    assert not task.verify(state(tmp_path, {"notes.txt": "a\nb\n"}, ("terminal",)), p).success
    # an unsaved buffer ("*" prefix) is not enough
    assert not task.verify(state(tmp_path, {"notes.txt": "a\nb\n"}, ("*" + saved,)), p).success
    assert not task.verify(state(tmp_path, {"notes.txt": "a\n"}, (saved,)), p).success
    assert not task.verify(state(tmp_path, {"notes.txt": "a\nb\n"}, ("othernotes.txt - Mousepad",)), p).success
