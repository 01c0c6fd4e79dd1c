"""What a policy sees: the screenshot, the instruction and its own earlier steps (the screens it
acted on and what it wrote there), never what the environment or the pipeline recorded beside
them (the task's page URL, rewards, errors, SDK output, log-probs, timings)."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest

from infra.runtime.policy import (PastStep, PolicyInput, SeenScreen, past_step_from_json, past_step_json, past_steps, screen,
                                  screen_or_none, state_at)
from producers.policy_client import PolicyRequest, policy_input
from producers.sandboxes.base import Obs
from schemas.actions import Click
from schemas.blobs import BlobNotFound, BlobStore
from schemas.codec import DecodeError
from schemas.events import BlobRef, Observation, Step, TaskSpec

URL = "miniwob/click-checkboxes.html"


def observation(i: int) -> Observation:
    return Observation(screenshot=BlobRef(sha256=f"{i:064x}", uri=f"file:///b/{i}"), screen_width=160,
                       screen_height=210, instruction="Select alpha and press Submit.", url=URL,
                       window_title="click-checkboxes")


def recorded(i: int) -> Step:
    return Step(episode_id="ep", ts=1.0, step_index=i, started_at=1.0, observation=observation(i),
                thought="I click it.", action=Click(x=0.25, y=0.5), raw_output="Thought: I click it.\nAction: …",
                parse_error=None, policy="pixel", policy_version=7, logprob=-1.5, value=0.3, reward=0.75,
                done=i == 1, latency_policy_ms=12.0, latency_env_ms=40.0, error="refused: no such element",
                output="shell output", next_screenshot_sha256=f"{i + 0xabc:064x}",
                expert_action=Click(x=0.875, y=0.125))


def test_a_policy_input_holds_only_the_screen_the_instruction_and_its_own_earlier_output():
    steps = [recorded(0), recorded(1)]
    inp = PolicyInput(np.zeros((210, 160, 3), np.uint8), "Select alpha and press Submit.", 160, 210, history=steps)
    assert {f.name for f in dataclasses.fields(inp)} == {"image", "instruction", "screen_width", "screen_height",
                                                         "history"}
    assert [type(s) for s in inp.history] == [PastStep, PastStep]
    assert {f.name for f in dataclasses.fields(PastStep)} == {"observation", "thought", "raw_output", "action"}
    assert {f.name for f in dataclasses.fields(SeenScreen)} == {"screenshot", "screen_width", "screen_height",
                                                                "instruction"}
    first = inp.history[0]
    assert (first.thought, first.raw_output, first.action) == (steps[0].thought, steps[0].raw_output, steps[0].action)
    assert first.observation.screenshot == steps[0].observation.screenshot
    seen = repr(inp.history)
    for leaked in (URL, "0.75", "refused", "shell output", "-1.5", "policy_version", "latency", "abc", "0.875",
                   "expert"):
        assert leaked not in seen, leaked
    for name in ("reward", "error", "output", "done", "logprob", "value", "policy_version", "next_screenshot_sha256",
                 "expert_action"):
        assert not hasattr(first, name), name
    for name in ("url", "window_title"):
        assert not hasattr(first.observation, name), name


def test_the_rollout_and_the_trainer_build_the_same_projected_history():
    """The rollout's request carries the recorded steps; the input it hands a policy does not,
    and a trainer rebuilding the input from the trajectory gets the same projection."""
    steps = [recorded(0), recorded(1)]
    task = TaskSpec(task_id="t", suite="miniwob", name="click-checkboxes")
    request = PolicyRequest(task=task, obs=Obs(observation(2), np.zeros((210, 160, 3), np.uint8)), step_index=2,
                            history=steps)
    inp = policy_input(request)
    assert inp.history == past_steps(steps) and all(isinstance(s, PastStep) for s in inp.history)
    assert past_steps(inp.history) == inp.history  # projecting twice changes nothing
    assert request.history == steps  # the worker's own record is untouched


def test_the_pixel_policy_reads_a_recorded_step_as_its_projection():
    from trainer.policies.pixel.model import PixelPolicy

    policy = PixelPolicy("p", {"seed": 0, "action_types": ["click"]})
    image = np.random.default_rng(0).integers(0, 255, (210, 160, 3), dtype=np.uint8)
    steps = [recorded(0), recorded(1)]
    full = policy.preprocess(image, steps, "Select alpha and press Submit.")
    seen = policy.preprocess(image, past_steps(steps), "Select alpha and press Submit.")
    assert full.shape == seen.shape and bool((full == seen).all())
    assert bool((full != policy.preprocess(image, [], "Select alpha and press Submit.")).any())  # it reads them


def test_the_wire_form_of_an_earlier_step_is_its_projection_and_is_checked():
    """``/v1/act``'s history: what leaves the worker is the projection, read back unchanged; a
    malformed entry is a DecodeError naming the field (the server answers 400)."""
    step = recorded(0)
    wire = past_step_json(step)
    assert set(wire) == {"observation", "thought", "raw_output", "action"}
    assert set(wire["observation"]) == {"screenshot", "screen_width", "screen_height", "instruction"}
    assert past_step_from_json(wire) == past_steps([step])[0]
    assert past_step_from_json({**wire, "action": None}).action is None
    for bad in ({"kind": "step"}, {**wire, "thought": 3}, {**wire, "action": {"type": "teleport"}},
                {**wire, "observation": {**wire["observation"], "screen_width": 0}}):
        with pytest.raises(DecodeError):
            past_step_from_json(bad)


def test_a_recorded_state_is_its_screen_its_instruction_and_only_the_steps_before_it():
    steps = [recorded(0), recorded(1)]
    image = np.zeros((210, 160, 3), np.uint8)
    inp = state_at(steps, 1, image)
    assert inp.image is image and (inp.screen_width, inp.screen_height) == (160, 210)
    assert inp.instruction == "Select alpha and press Submit."
    assert state_at(steps, 1, image, "click-checkboxes").instruction == "Select alpha and press Submit."  # its own wins
    assert inp.history == past_steps(steps[:1])
    silent = [s.model_copy(update={"observation": s.observation.model_copy(update={"instruction": ""})}) for s in steps]
    assert state_at(silent, 0, image, "click-checkboxes").instruction == "click-checkboxes"  # the fallback
    assert state_at(silent, 0, image, "click-checkboxes").history == []


def test_a_stored_screen_reads_back_as_rgb_and_a_missing_one_is_none_or_not_found(tmp_path):
    from PIL import Image  # local: only this test writes a picture

    store = BlobStore(str(tmp_path))
    ref = store.put_image(Image.new("RGBA", (4, 3), (10, 20, 30, 255)))
    pixels = screen(store, ref)
    assert pixels.shape == (3, 4, 3) and pixels.dtype == np.uint8 and tuple(pixels[0, 0]) == (10, 20, 30)
    gone = BlobRef(sha256="0" * 64, uri="file:///gone")
    assert screen_or_none(store, gone) is None and screen_or_none(store, gone.sha256) is None
    assert (screen_or_none(store, ref) == pixels).all()
    with pytest.raises(BlobNotFound):
        screen(store, gone.sha256)


def test_many_unreadable_screens_are_said_in_a_few_lines_with_their_count(tmp_path, caplog, monkeypatch):
    """A store that lost its blobs: each missing screenshot is None, but the log gets the first few
    and then one line a hundred, each with the running count (it got one line a step)."""
    import infra.runtime.policy as P

    store = BlobStore(str(tmp_path))
    monkeypatch.setattr(P, "_UNREADABLE", itertools.count(1))
    with caplog.at_level("WARNING", logger="flywheel.policy"):
        assert all(screen_or_none(store, f"{i:064x}") is None for i in range(250))
    lines = [r.getMessage() for r in caplog.records if "unavailable" in r.getMessage()]
    assert len(lines) == P._SAID_EACH + 2  # 1-5, then 100 and 200
    assert "(100 so far" in lines[-2] and "(200 so far" in lines[-1]


def test_every_unreadable_screen_from_several_threads_is_counted(tmp_path, monkeypatch):
    """The rollout reads screens from several threads: each failure takes one number from the
    counter (800 failures, the next number 801). It does not show the counter atomic; that is
    itertools.count's next() in CPython, where the dict's += it replaced was not guaranteed."""
    import threading

    import infra.runtime.policy as P

    monkeypatch.setattr(P, "_UNREADABLE", itertools.count(1))
    store = BlobStore(str(tmp_path))
    threads = [threading.Thread(target=lambda: [screen_or_none(store, f"{i:064x}") for i in range(200)])
               for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert next(P._UNREADABLE) == 801
