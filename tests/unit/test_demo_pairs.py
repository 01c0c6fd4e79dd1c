"""Pairs from demonstrations (app.ui.demo_pairs): where a policy put in the person's place would
first leave their path, on the fake click-checkboxes page of test_reflection. No browser."""

from __future__ import annotations

import asyncio

import pytest

from app.ui.demo_pairs import departure_pair, first_departure, per_task_counts, pick_demonstrations
from producers.reflection import ReplayDiverged
from schemas.actions import Click
from schemas.events import PairSide, TaskSpec
from tests.unit.test_reflection import SUBMIT, FakeEnv, checkbox, record


def person(**kw):
    """The person's demonstration: tick alpha, then Submit."""
    demo = record([checkbox(0), SUBMIT], **kw)
    return demo.model_copy(update={"policy": "human:alice", "success": True})


def departure(demo, wanted, env=None):
    return asyncio.run(first_departure(demo, wanted, env or FakeEnv()))


def test_the_first_state_where_the_policy_would_click_another_element_is_the_departure():
    assert departure(person(), [checkbox(0), checkbox(1)]) == 1
    assert departure(person(), [SUBMIT, SUBMIT]) == 0


def test_a_policy_that_clicks_the_persons_elements_follows_them_to_the_end():
    inside = Click(x=checkbox(0).x + 2 / 160, y=checkbox(0).y)  # elsewhere in the same box
    assert departure(person(), [inside, SUBMIT]) is None


def test_an_unparsed_action_departs():
    assert departure(person(), [None, SUBMIT]) == 0


def test_a_replay_that_shows_another_page_is_refused():
    with pytest.raises(ReplayDiverged):
        departure(person(), [checkbox(0), SUBMIT], FakeEnv(wanted=("beta",)))


def test_the_pair_prefers_the_persons_action_to_the_policys_at_the_departure():
    demo = person()
    pair = departure_pair(demo, 1, PairSide(action=checkbox(1), thought="t", raw_output="r"), "pixel-v", 147, 9.0)
    assert pair.kind == "error_correction" and pair.tau == pair.step_index == 1
    assert pair.chosen.action == SUBMIT and pair.rejected.action == checkbox(1)
    assert pair.observation == demo.steps[1].observation and pair.history == demo.steps[:1]
    assert (pair.annotator, pair.policy, pair.policy_version, pair.episode_id) == ("human:alice", "pixel-v", 147, demo.episode_id)


def test_demonstrations_are_walked_once_in_the_order_of_their_task_seeds_and_only_for_the_tasks_asked():
    def demo(name, seed, ep):
        d = person()
        return d.model_copy(update={"episode_id": ep, "task": TaskSpec(task_id=ep, suite="miniwob", name=name, seed=seed)})

    demos = [demo("a", 7002, "e2"), demo("b", 1, "e3"), demo("a", 7000, "e0"), demo("c", 5, "e5"), demo("a", 7000, "e0")]
    picked = pick_demonstrations(demos, {"a": 2, "b": 1, "c": 0})
    assert {t: [d.episode_id for d in ds] for t, ds in picked.items()} == {"a": ["e0", "e2"], "b": ["e3"]}


def test_counts_per_task():
    assert per_task_counts("", ["a", "b"], 5) == {"a": 5, "b": 5}
    assert per_task_counts("a=3,b=0", ["x"], 5) == {"a": 3, "b": 0}
    with pytest.raises(ValueError, match="task=n"):
        per_task_counts("a=three", [], 5)
