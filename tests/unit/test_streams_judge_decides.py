"""A task the judge decides: its score replaces the page's verdict in the reward and V(s)."""

from __future__ import annotations

import math

import pytest

from infra.runtime.errors import UserError
from streams.assemble import add_event
from streams.score import judge_decides, judge_outcome, make_scorer, parse_judge_tasks
from tests.fakes.steps import episode_events


def assemble(events):
    state, traj = None, None
    for ev in events:
        state, out = add_event(state, ev, 200.0)
        traj = out or traj
    return traj


class Fixed:
    def __init__(self, score: float) -> None:
        self.score, self.asked = score, 0

    def judge(self, traj):
        self.asked += 1
        return self.score


def test_the_judges_score_replaces_the_pages_verdict():
    """The page says success; the judge says 0.1: the reward and V(s) follow the judge, and the
    page's verdict stays in the trajectory to be measured against."""
    judge = Fixed(0.1)
    scored = make_scorer("rule-v1", judge, frozenset({"click-test"})).score(assemble(episode_events("ep-1", 2)), 0.0)
    assert "outcome" not in scored.components and "judge" not in scored.components
    assert math.isclose(scored.components["judge_outcome"], 0.1 * 1 + 0.9 * -1.0)
    assert math.isclose(sum(scored.components.values()), scored.reward)
    assert scored.verdict == 0 and scored.trajectory.success and judge.asked == 1


def test_a_judged_success_is_sft_whatever_the_page_said():
    traj = assemble(episode_events("ep-1", 2, success=False))
    scored = make_scorer("rule-v1", Fixed(0.8), frozenset({"*"}), judge_success_at=0.7).score(traj, 0.0)
    assert scored.verdict == 1 and math.isclose(scored.components["judge_outcome"], 0.6)
    assert make_scorer("rule-v1", Fixed(0.6), frozenset({"*"}), judge_success_at=0.7).score(traj, 0.0).verdict == 0


def test_tasks_the_judge_does_not_decide_keep_the_page_and_are_not_sent():
    judge = Fixed(0.0)
    scored = make_scorer("rule-v1", judge, frozenset({"other-task"})).score(assemble(episode_events("ep-1", 2)), 0.0)
    assert scored.components["outcome"] == 1.0 and "judge" not in scored.components and judge.asked == 0
    assert scored.verdict == 1


def test_without_judge_tasks_the_judge_still_only_adds_its_score():
    scored = make_scorer("rule-v1", Fixed(0.25)).score(assemble(episode_events("ep-1", 1)), 0.0)
    assert scored.components["outcome"] == 1.0 and scored.components["judge"] == 0.25


def test_an_aborted_episode_is_worth_nothing_whatever_the_judge_says():
    traj = assemble(episode_events("ep-1", 2, aborted=True))
    assert judge_outcome(traj, 1.0) == 0.0


def test_judge_tasks_option_and_its_need_for_a_judge():
    assert parse_judge_tasks(" a, b ,,") == frozenset({"a", "b"}) and parse_judge_tasks("") == frozenset()
    assert judge_decides("x", frozenset({"*"})) and not judge_decides("x", frozenset({"y"}))
    with pytest.raises(UserError, match="need a judge"):
        make_scorer("rule-v1", None, frozenset({"*"}))


@pytest.mark.parametrize("at", [math.nan, -0.1, 1.5])
def test_a_success_threshold_outside_the_judges_scale_is_refused(at):
    """NaN or a value outside [0, 1] would make every judged task a failure (or a success) without a word."""
    with pytest.raises(UserError, match="judge-success-at"):
        make_scorer("rule-v1", lambda traj: 0.5, frozenset({"*"}), judge_success_at=at)
