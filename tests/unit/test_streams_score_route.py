"""Reward scoring, anomaly filter, scorer registry and flywheel routing."""

from __future__ import annotations

import math
import typing

import pytest

from infra.runtime.errors import UserError
from infra.runtime.topics import TOPICS
from schemas.actions import CallUser, Click, Finished, Wait
from schemas.events import TaskSpec
from streams.assemble import add_event, close_abandoned
from streams.route import route, staleness
from streams.score import FAILED_OUTCOME, SCORERS, find_anomalies, make_scorer
from tests.fakes.steps import episode_events, fake_sha, step


def assemble(events):
    state = None
    for ev in events:
        state, traj = add_event(state, ev, 0.0)
        if traj is not None:
            return traj
    raise AssertionError("episode did not complete")


def with_steps(traj, steps):
    return traj.model_copy(update={"steps": steps})


def test_components_sum_to_reward_and_success_is_sft():
    traj = assemble(episode_events("ep-1", 4))
    scored = make_scorer("rule-v1").score(traj, now=5.0)
    assert set(scored.components) == {"outcome", "format", "length", "shaping", "anomaly"}
    assert math.isclose(sum(scored.components.values()), scored.reward)
    assert scored.components["outcome"] == 1.0 and scored.components["length"] == pytest.approx(-0.05 * 0.4)
    assert scored.verdict == 1 and scored.rl_eligible and scored.anomalies == []
    assert (scored.scorer, scored.scorer_version) == ("rule-v1", "1.4")
    assert scored.event_id == "ep-1:rule-v1:1.4"


def test_parse_errors_are_penalised_and_strict_refuses_sft():
    traj = assemble(episode_events("ep-1", 2))
    bad = step("ep-1", 1, action=None, parse_error="no Action:")
    traj = with_steps(traj, [traj.steps[0], bad])
    rule = make_scorer("rule-v1").score(traj, 0.0)
    strict = make_scorer("strict-v1").score(traj, 0.0)
    assert rule.components["format"] == pytest.approx(-0.1 * 0.5)
    assert strict.components["format"] == pytest.approx(-0.2 * 0.5)
    assert rule.verdict == 1 and strict.verdict == 0
    assert strict.event_id != rule.event_id


def test_anomaly_filter_finds_no_effect_and_loops():
    same = fake_sha("frozen")
    click = Click(x=0.1, y=0.1)
    steps = [step("ep", i, action=click, screen=same, next_screen=same) for i in range(3)]
    steps.append(step("ep", 3, action=Wait(), screen=same, next_screen=same))  # waiting may change nothing
    messages, flagged = find_anomalies(steps, repeat_limit=3)
    assert flagged == {0, 1, 2}
    assert sum("no visible effect" in m for m in messages) == 3
    assert sum("repeated" in m for m in messages) == 1


def test_strict_scorer_penalises_anomalies():
    traj = assemble(episode_events("ep-1", 2))
    same = fake_sha("x")
    traj = with_steps(traj, [step("ep-1", i, action=Click(x=0.2, y=0.2), screen=same, next_screen=same)
                             for i in range(2)])
    scored = make_scorer("strict-v1").score(traj, 0.0)
    assert scored.components["anomaly"] == pytest.approx(-0.2) and scored.verdict == 0
    assert math.isclose(sum(scored.components.values()), scored.reward)


def test_judge_component_is_added_when_a_judge_is_set():
    class Fixed:
        def judge(self, traj):
            return 0.25

    scored = make_scorer("rule-v1", judge=Fixed()).score(assemble(episode_events("ep-1", 1)), 0.0)
    assert scored.components["judge"] == 0.25
    assert math.isclose(sum(scored.components.values()), scored.reward)


def test_registry_names_and_unknown_scorer():
    assert {"rule-v1", "strict-v1"} <= set(SCORERS)
    with pytest.raises(UserError, match="unknown scorer"):
        make_scorer("nope")


def routed_topics(routing):
    return [spec.name for spec, _ in routing.records]


def test_success_goes_to_sft_and_rl():
    scored = make_scorer("rule-v1").score(assemble(episode_events("ep-1", 2)), 0.0)
    r = route(scored, {}, max_staleness=2)
    assert routed_topics(r) == [TOPICS.sft.name, TOPICS.rl.name]
    record = r.records[0][1]
    assert record.routes == ["sft", "rl"] and record.rl_eligible and record.event_id == scored.event_id


def test_failure_goes_to_ct_and_rl():
    scored = make_scorer("rule-v1").score(assemble(episode_events("ep-1", 2, success=False)), 0.0)
    assert routed_topics(route(scored, {}, 2)) == [TOPICS.ct.name, TOPICS.rl.name]


def test_stale_policy_is_kept_out_of_rl():
    scored = make_scorer("rule-v1").score(assemble(episode_events("ep-1", 2, policy_version=3)), 0.0)
    assert staleness(scored, {"pixel-ppo": 6}) == 3
    r = route(scored, {"pixel-ppo": 6}, max_staleness=2)
    assert routed_topics(r) == [TOPICS.sft.name]
    assert any("stale" in reason for reason in r.reasons) and not r.records[0][1].rl_eligible
    assert routed_topics(route(scored, {"pixel-ppo": 5}, max_staleness=2))[-1] == TOPICS.rl.name


def test_infra_abort_and_abandoned_never_reach_rl():
    crashed = make_scorer("rule-v1").score(assemble(episode_events("ep-1", 2, aborted=True, infra_failure=True)), 0.0)
    assert routed_topics(route(crashed, {}, 2)) == [TOPICS.ct.name]
    state = None
    for ev in episode_events("ep-2", 2)[:-1]:
        state, _ = add_event(state, ev, 0.0)
    _, abandoned = close_abandoned(state, now=100.0, idle_s=1.0)
    scored = make_scorer("rule-v1").score(abandoned, 0.0)
    assert scored.components["outcome"] == 0.0 and not scored.rl_eligible
    assert TOPICS.rl.name not in routed_topics(route(scored, {}, 2))


@pytest.mark.parametrize("suite,reason,expected", [
    ("miniwob", "step_budget", -1.0),  # MiniWoB++'s failed outcome: running out is no better than a wrong answer
    ("miniwob", "timeout", -1.0),
    ("desktop", "step_budget", 0.0),  # a desktop verifier's failure is 0
    ("miniwob", "done", 0.25),  # the environment's verdict is kept
])
def test_a_task_judged_at_its_end_that_ran_out_scores_its_failed_outcome(suite, reason, expected):
    traj = assemble(episode_events("ep-1", 3, success=False))
    traj = traj.model_copy(update={"end_reason": reason, "outcome_reward": 0.25 if reason == "done" else 0.0,
                                   "task": traj.task.model_copy(update={"suite": suite})})
    scored = make_scorer("rule-v1").score(traj, 0.0)
    assert scored.components["outcome"] == expected
    wrong = make_scorer("rule-v1").score(traj.model_copy(update={"end_reason": "done", "outcome_reward": -1.0}), 0.0)
    if suite == "miniwob" and reason != "done":  # waiting the budget out never pays better than trying
        assert scored.reward <= wrong.reward


@pytest.mark.parametrize("suite,last,success,expected", [
    ("miniwob", Finished(), False, -1.0),  # the page never judged it: giving up pays no better than a wrong answer
    ("miniwob", CallUser(), False, -1.0),
    ("desktop", Finished(), False, 0.0),  # the desktop verifier's failure is 0
    ("miniwob", Click(x=0.5, y=0.5), False, 0.0),  # the page's own verdict is kept
    ("desktop", Finished(), True, 1.0),  # a finished that the verifier judged a success
])
def test_a_task_judged_at_its_end_that_the_agent_gave_up_on_scores_its_failed_outcome(suite, last, success, expected):
    traj = assemble(episode_events("ep-1", 3, success=success))
    steps = traj.steps[:-1] + [traj.steps[-1].model_copy(update={"action": last})]
    traj = traj.model_copy(update={"steps": steps, "task": traj.task.model_copy(update={"suite": suite})})
    scored = make_scorer("rule-v1").score(traj, 0.0)
    assert scored.components["outcome"] == expected
    ran_out = make_scorer("rule-v1").score(traj.model_copy(update={"end_reason": "step_budget", "success": False,
                                                                    "outcome_reward": 0.0}), 0.0)
    if last.type != "click" and not success:  # giving up never pays better than running out
        assert scored.components["outcome"] <= ran_out.components["outcome"]


def test_every_suite_judged_at_its_end_has_a_failed_outcome():
    """A new suite in TaskSpec.suite must say what failing it is worth: FAILED_OUTCOME.get's
    default of 0 would bring back the loophole (running out paying better than a wrong answer)."""
    suites = set(typing.get_args(TaskSpec.model_fields["suite"].annotation))
    assert suites - {"games"} == set(FAILED_OUTCOME)  # games carry their score wherever they stop


def test_a_game_that_ran_out_keeps_its_score():
    traj = assemble(episode_events("ep-1", 3, success=False))
    traj = traj.model_copy(update={"end_reason": "step_budget", "outcome_reward": 0.4, "score": 12.0,
                                   "normalised_score": 0.4,
                                   "task": traj.task.model_copy(update={"suite": "games", "name": "games.2048"})})
    assert make_scorer("rule-v1").score(traj, 0.0).components["outcome"] == 0.4


@pytest.mark.parametrize("normalised,v", [(0.4, 0), (0.5, 1), (0.9, 1), (1.6, 1)])
def test_a_game_is_sft_from_half_the_heuristics_mean(normalised, v):
    traj = assemble(episode_events("ep-1", 3, success=normalised >= 1))
    traj = traj.model_copy(update={"score": 100.0 * normalised, "normalised_score": normalised, "outcome_reward": normalised,
                                   "task": traj.task.model_copy(update={"suite": "games", "name": "games.snake"})})
    assert make_scorer("rule-v1").score(traj, 0.0).verdict == v


def test_policy_error_abort_is_rl_eligible():
    scored = make_scorer("rule-v1").score(assemble(episode_events("ep-1", 2, aborted=True)), 0.0)
    assert scored.verdict == 0 and routed_topics(route(scored, {}, 2)) == [TOPICS.ct.name, TOPICS.rl.name]


@pytest.mark.parametrize("success,kept", [(True, TOPICS.sft.name), (False, TOPICS.ct.name)])
def test_greedy_trajectory_keeps_its_sft_or_ct_route_but_never_reaches_rl(success, kept):
    traj = assemble(episode_events("ep-1", 3, success=success))
    greedy = with_steps(traj, [traj.steps[0], traj.steps[1].model_copy(update={"sampled": False}), traj.steps[2]])
    assert (traj.unsampled_steps, greedy.unsampled_steps) == ([], [1])
    sampled, scored = (make_scorer("rule-v1").score(t, 0.0) for t in (traj, greedy))
    assert sampled.rl_eligible and not scored.rl_eligible
    assert (scored.verdict, scored.reward) == (sampled.verdict, sampled.reward)  # the verdict is not the scorer's to change
    r = route(scored, {}, 2)
    assert routed_topics(route(sampled, {}, 2)) == [kept, TOPICS.rl.name] and routed_topics(r) == [kept]
    assert "rl: not sampled (greedy or scripted actions)" in r.reasons and not r.records[0][1].rl_eligible
    # the router keeps it out of RL even where a scorer called it eligible
    trusted = route(scored.model_copy(update={"rl_eligible": True}), {}, 2)
    assert routed_topics(trusted) == [kept] and not trusted.records[0][1].rl_eligible


def test_rl_clean_rule_drops_anomalous_from_rl():
    traj = assemble(episode_events("ep-1", 2))
    same = fake_sha("x")
    traj = with_steps(traj, [step("ep-1", i, screen=same, next_screen=same) for i in range(2)])
    scored = make_scorer("rule-v1").score(traj, 0.0)
    assert TOPICS.rl.name in routed_topics(route(scored, {}, 2, rule="flywheel-v1"))
    r = route(scored, {}, 2, rule="rl-clean-v1")
    assert TOPICS.rl.name not in routed_topics(r) and "rl: 2 anomalies" in r.reasons
    with pytest.raises(UserError, match="unknown routing rule"):
        route(scored, {}, 2, rule="nope")


def test_rescore_since_and_app_id():
    from datetime import datetime, timezone

    from infra.runtime.settings import Settings
    from streams.config import StreamsConfig, app_id_for
    from streams.rescore import parse_since

    assert parse_since("") is None
    assert parse_since("2h", clock=10_000.0) == 10_000.0 - 7200
    assert parse_since("1700000000") == 1_700_000_000.0
    assert parse_since("2024-01-02T03:04:05+00:00") == datetime(2024, 1, 2, 3, 4, 5, tzinfo=timezone.utc).timestamp()
    with pytest.raises(UserError, match="--since"):
        parse_since("yesterday-ish")
    assert app_id_for(Settings(topic_prefix="t1234."), StreamsConfig()) == "t1234.flywheel-streams"
    assert app_id_for(Settings(), StreamsConfig(app_id="mine")) == "mine"
