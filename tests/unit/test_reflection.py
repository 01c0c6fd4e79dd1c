"""Reflection annotation (producers.reflection) on a fake click-checkboxes page: where the first
wrong step is, which pairs it gives, and when the replay is refused. No browser."""

from __future__ import annotations

import asyncio
import hashlib

import pytest

from producers.reflection import (
    NoSolver, ReplayDiverged, annotate, same_action, target_element,
)
from schemas.actions import Click, PressEnter, Scroll, Type, Wait
from schemas.uitars import render_output
from schemas.events import BlobRef, Observation, Step, TaskSpec, Trajectory

W, H = 160, 210
LABELS = ("alpha", "beta", "gamma")


def box(x, y, w, h, **kw):
    base = {"tag": "div", "id": "", "text": "", "value": None, "focused": False, "checked": False, "cls": "",
            "input": "", "scroll": [0, 0, 0]}
    return {**base, **kw, "x": x, "y": y, "w": w, "h": h}


def centre(el) -> Click:
    return Click(x=(el["x"] + el["w"] / 2) / W, y=(el["y"] + el["h"] / 2) / H)


class FakeCheckboxes:
    """click-checkboxes as the solver sees it: a label with a box per option, and Submit."""

    def __init__(self, wanted=("alpha",), instruction=None) -> None:
        self.wanted = set(wanted)
        self.instruction = instruction or f"Select {', '.join(sorted(self.wanted))} and click Submit"
        self.checked = {name: False for name in LABELS}
        self.done = False

    def dom(self):
        els = []
        for i, name in enumerate(LABELS):
            els.append(box(10, 60 + 24 * i, 120, 20, tag="label", text=name))
            els.append(box(12, 63 + 24 * i, 14, 14, tag="input", input="checkbox", checked=self.checked[name]))
        els.append(box(10, 150, 60, 30, tag="button", id="subbtn", text="Submit"))
        return {"width": W, "height": H, "elements": els}

    def observation(self) -> Observation:
        state = repr((sorted(self.checked.items()), self.done)).encode()
        sha = hashlib.sha256(state).hexdigest()
        return Observation(screenshot=BlobRef(sha256=sha, uri=f"mem://{sha}"), screen_width=W, screen_height=H,
                           instruction=self.instruction)

    def act(self, action) -> bool:
        if action is not None and action.type == "click":
            el = target_element(action, self.dom())
            if el is not None and el["tag"] in ("label", "input"):
                i = [e for e in self.dom()["elements"] if e["tag"] == el["tag"]].index(el)
                self.checked[LABELS[i]] = not self.checked[LABELS[i]]
            elif el is not None and el["id"] == "subbtn":
                self.done = True
        return self.done


class FakeEnv:
    """The ReplayEnv over a fresh FakeCheckboxes per reset."""

    def __init__(self, **page) -> None:
        self.page_args, self.page, self.resets, self.steps = page, None, 0, 0

    async def reset(self, task):
        self.page, self.resets = FakeCheckboxes(**self.page_args), self.resets + 1
        return self.page.observation(), self.page.dom()

    async def step(self, action):
        self.steps += 1
        done = self.page.act(action)
        return self.page.observation(), self.page.dom(), done


def checkbox(i: int) -> Click:
    return centre(FakeCheckboxes().dom()["elements"][2 * i + 1])


SUBMIT = centre(box(10, 150, 60, 30))


def record(actions, task_name="click-checkboxes", **page) -> Trajectory:
    """An episode of the fake page with these actions, as the rollout would have recorded it."""
    p, steps = FakeCheckboxes(**page), []
    task = TaskSpec(task_id="t1", suite="miniwob", name=task_name, seed=3)
    for i, a in enumerate(actions):
        obs = p.observation()
        done = p.act(a)
        steps.append(Step(episode_id="ep-1", ts=1.0, step_index=i, started_at=1.0, observation=obs, action=a,
                          raw_output="" if a is not None else "Action: clack()", policy="pixel-miniwob",
                          policy_version=4 + i, logprob=-1.0, done=done,
                          next_screenshot_sha256=p.observation().screenshot.sha256))
        if done:
            break
    return Trajectory(episode_id="ep-1", task=task, sandbox="browser", worker_id="w", policy="pixel-miniwob",
                      steps=steps, status="ended", success=False, started_at=1.0, ended_at=2.0)


def run(traj, env=None, **kw):
    return asyncio.run(annotate(traj, env or FakeEnv(), clock=lambda: 123.0, **kw))


# ---------------------------------------------------------------- matching


def test_a_click_anywhere_in_the_target_matches_and_outside_does_not():
    dom = FakeCheckboxes().dom()
    want = checkbox(0)
    assert target_element(want, dom)["tag"] == "input"  # the box on top under the point (after its label)
    assert same_action(want, Click(x=14 / W, y=65 / H), dom)  # a corner of the same box
    assert not same_action(want, Click(x=40 / W, y=70 / H), dom)  # the label around it: another element
    assert not same_action(want, checkbox(1), dom)
    assert not same_action(want, None, dom)  # unparsed
    assert not same_action(want, PressEnter(), dom)


def test_a_click_on_a_part_of_the_target_that_another_element_covers_hits_that_one():
    """click-test-2: TWO (later in the page) overlaps ONE; a click inside ONE's box but under TWO
    presses TWO, so it is not the solver's click on ONE's free part (the annotator said "no error")."""
    one = box(40, 100, 40, 40, tag="button", id="subbtn", text="ONE")
    two = box(60, 120, 40, 40, tag="button", id="subbtn2", text="TWO")
    dom = {"width": W, "height": H, "elements": [one, two]}
    want = Click(x=50 / W, y=110 / H)  # ONE's uncovered corner
    assert target_element(want, dom) is one
    assert same_action(want, Click(x=45 / W, y=105 / H), dom)  # elsewhere on ONE's free part
    covered = Click(x=75 / W, y=135 / H)  # inside ONE's box, under TWO
    assert target_element(covered, dom) is two
    assert not same_action(want, covered, dom)


def test_text_scroll_and_argument_free_actions_compare_their_arguments():
    dom = FakeCheckboxes().dom()
    assert same_action(Type(content="abc"), Type(content="abc"), dom)
    assert not same_action(Type(content="abc"), Type(content="abd"), dom)
    down = Scroll(x=0.5, y=0.4, direction="down")
    assert same_action(down, Scroll(x=0.51, y=0.4, direction="down"), dom)
    assert not same_action(down, Scroll(x=0.5, y=0.4, direction="up"), dom)
    assert same_action(PressEnter(), PressEnter(), dom)


# ---------------------------------------------------------------- pairs


def test_wrong_box_gives_an_error_correction_and_a_post_reflection_pair():
    traj = record([checkbox(1), SUBMIT])  # ticks beta (alpha wanted), then submits
    out = run(traj)
    assert (out.outcome, out.tau) == ("pairs", 0)
    ec, pr = out.pairs
    assert (ec.kind, ec.tau, ec.step_index, ec.history) == ("error_correction", 0, 0, [])
    assert ec.chosen.action == checkbox(0) and ec.rejected.action == checkbox(1)
    assert ec.observation == traj.steps[0].observation and (ec.policy, ec.policy_version) == ("pixel-miniwob", 4)
    # after ticking beta the solver fixes the page top to bottom: alpha first; the agent submitted instead
    assert (pr.kind, pr.tau, pr.step_index, pr.history) == ("post_reflection", 0, 1, traj.steps[:1])
    assert pr.observation == traj.steps[1].observation
    assert pr.chosen.action == checkbox(0) and pr.rejected.action == SUBMIT and pr.policy_version == 5
    assert ec.event_id == "ep-1:error_correction:scripted-v1" and ec.created_at == 123.0


def test_stopping_at_the_error_gives_its_pair_without_replaying_the_state_after_it():
    traj = record([checkbox(1), SUBMIT])
    after = Observation(screenshot=BlobRef(sha256="e" * 64, uri="mem://x"), screen_width=W, screen_height=H,
                        instruction=traj.steps[1].observation.instruction)
    diverged_after = traj.model_copy(update={"steps": [traj.steps[0], traj.steps[1].model_copy(update={"observation": after})]})
    with pytest.raises(ReplayDiverged, match="step 1"):
        run(diverged_after)  # the whole walk checks the state after the error too
    out = run(diverged_after, after_error=False)
    assert (out.outcome, out.tau, [p.kind for p in out.pairs]) == ("error_found", 0, ["error_correction"])
    assert out.pairs[0].chosen.action == checkbox(0) and out.pairs[0].rejected.action == checkbox(1)


def test_a_judge_other_than_the_scripted_solvers_names_itself_where_it_knows_no_task():
    with pytest.raises(NoSolver, match="no routine of a person for task 'click-checkboxes'"):
        run(record([SUBMIT]), knows=lambda task: False, who="routine of a person")


def test_the_annotators_sides_carry_the_demonstrations_thought_so_a_pair_differs_in_its_action_only():
    """A language policy cloned from the scripted demonstrations writes their Thought; the
    annotator's side writes the same one, so the two sides' texts differ after "Action:" only
    (before stop 24 the chosen side had no Thought, and DPO learnt to drop it)."""
    from producers import scripted
    from trainer.policies.lm.pairs import side_text

    traj = record([checkbox(1), SUBMIT])
    written = render_output(scripted.thought(checkbox(1)), checkbox(1), 160, 210)
    traj.steps[0] = traj.steps[0].model_copy(update={"thought": scripted.thought(checkbox(1)),
                                                     "raw_output": written})
    ec, pr = run(traj).pairs
    clicking = "The instruction's target is on the screen: I click it."
    assert ec.chosen.thought == pr.chosen.thought == scripted.thought(checkbox(0)) == clicking
    good, bad = (side_text(side, 160, 210, "qwen25vl") for side in (ec.chosen, ec.rejected))
    assert good.split("Action:")[0] == bad.split("Action:")[0] == f"Thought: {clicking}\n"
    assert good != bad


def test_tau_is_the_first_wrong_step_and_the_history_is_the_steps_before_it():
    traj = record([checkbox(0), checkbox(2), SUBMIT])  # alpha right, then gamma wrong
    out = run(traj)
    ec, pr = out.pairs
    assert out.tau == 1 and ec.history == traj.steps[:1] and ec.rejected.action == checkbox(2)
    assert ec.chosen.action == SUBMIT  # every box as wanted: the solver submits
    assert pr.history == traj.steps[:2] and pr.chosen.action == checkbox(2)  # untick gamma: the recovery
    assert pr.rejected.action == SUBMIT


def test_an_agent_that_recovers_by_itself_gives_no_post_reflection_pair():
    out = run(record([checkbox(1), checkbox(0), checkbox(1), SUBMIT]))
    assert out.outcome == "agent_recovered" and [p.kind for p in out.pairs] == ["error_correction"]


def test_an_error_that_ends_the_episode_gives_only_the_error_correction_pair():
    out = run(record([SUBMIT]))
    assert out.outcome == "error_ended_episode" and [p.kind for p in out.pairs] == ["error_correction"]
    assert out.pairs[0].chosen.action == checkbox(0)


def test_an_episode_cut_after_its_error_has_a_post_reflection_pair_without_rejected_side():
    traj = record([checkbox(2)])  # the step budget ended it
    env = FakeEnv()
    ec, pr = run(traj, env).pairs
    assert pr.rejected is None and pr.policy_version == 4
    assert pr.observation.screenshot.sha256 == traj.steps[0].next_screenshot_sha256  # the replayed screen
    assert env.steps == 1  # nothing replayed past the state after the error


def test_an_unparsed_action_is_an_error_whose_rejected_side_is_the_text():
    ec = run(record([None, checkbox(0), SUBMIT])).pairs[0]
    assert ec.tau == 0 and ec.rejected.action is None and ec.rejected.raw_output == "Action: clack()"


def test_an_agent_that_followed_the_solver_has_no_error_to_annotate():
    out = run(record([checkbox(0)]))  # right, but the budget ran out before Submit
    assert out.outcome == "no_error" and out.pairs == [] and out.tau is None


# ---------------------------------------------------------------- refusals


def test_a_task_without_a_solver_is_refused():
    with pytest.raises(NoSolver, match="no scripted solver"):
        run(record([SUBMIT], task_name="book-flight"))


def with_another_screen_at_step_1():
    """An episode whose step 1 recorded a screen the replay will not show (its bytes differ)."""
    traj = record([checkbox(0), checkbox(1), SUBMIT])
    other = Observation(screenshot=BlobRef(sha256="f" * 64, uri="mem://x"), screen_width=W, screen_height=H,
                        instruction=traj.steps[1].observation.instruction)
    return traj.model_copy(update={"steps": [traj.steps[0], traj.steps[1].model_copy(update={"observation": other}),
                                             traj.steps[2]]})


def test_a_replay_that_shows_another_screen_is_refused_unless_screens_are_not_verified():
    bad = with_another_screen_at_step_1()
    with pytest.raises(ReplayDiverged, match="step 1: replayed screen"):
        run(bad)
    assert run(bad, verify_screens=False).tau == 1


def test_a_screen_other_in_its_bytes_passes_where_the_replay_says_it_looks_the_same():
    bad = with_another_screen_at_step_1()
    asked = []
    env = FakeEnv()
    env.looks_same = lambda recorded: asked.append(recorded.screenshot.sha256) or True
    assert run(bad, env).tau == 1 and asked == ["f" * 64]  # asked only where the bytes differ
    env.looks_same = lambda recorded: False
    with pytest.raises(ReplayDiverged, match="step 1: replayed screen"):
        run(bad, env)


def test_another_instruction_or_a_gap_is_refused():
    with pytest.raises(ReplayDiverged, match="instruction"):
        run(record([checkbox(1)]), FakeEnv(wanted=("beta",)))
    traj = record([checkbox(0), checkbox(1)])
    with pytest.raises(ReplayDiverged, match="gaps"):
        run(traj.model_copy(update={"steps": traj.steps[1:], "missing_steps": [0]}))


def test_a_replay_that_ends_early_is_refused():
    traj = record([checkbox(0), SUBMIT])
    early = traj.model_copy(update={"steps": [traj.steps[0], traj.steps[1].model_copy(update={"done": False})]})
    extra = early.steps + [early.steps[1].model_copy(update={"step_index": 2, "action": Wait()})]
    with pytest.raises(ReplayDiverged, match="the replay ended"):
        run(early.model_copy(update={"steps": extra}))
