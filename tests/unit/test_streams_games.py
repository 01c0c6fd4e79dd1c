"""A game's episode through the stream stages: the trajectory carries the ended event's final
and normalised score, and the scorer routes it by the normalised score (V(s)=1 from the stated
threshold, 1.0 = the reference heuristic's mean), not by ``success``."""

from __future__ import annotations

from infra.runtime.topics import TOPICS
from streams.route import get_rule
from streams.score import make_scorer
from tests.fakes.steps import episode_events
from streams.topology import pipeline, run_chain, run_keyed


def game_trajectory(score: float | None, normalised: float | None, success: bool):
    assemble, score_stage, route = pipeline(make_scorer("rule-v1"), get_rule("flywheel-v1"), {}, 4)
    events = episode_events("g-1", 5, success=success)
    end = events[-1].model_copy(update={"score": score, "normalised_score": normalised})
    state, outputs = None, []
    for ev in events[:-1] + [end]:
        state, out = run_keyed(assemble, state, ev, 1000.0)
        outputs += out
    [(_, traj)] = outputs
    return traj, run_chain((score_stage, route), traj, 1001.0)


def test_the_trajectory_carries_the_games_scores():
    traj, _ = game_trajectory(1719.0, 1.0, success=True)
    assert (traj.score, traj.normalised_score) == (1719.0, 1.0)
    plain, _ = game_trajectory(None, None, success=True)
    assert plain.score is None and plain.normalised_score is None


def test_a_game_is_routed_by_its_normalised_score():
    _, above = game_trajectory(2000.0, 1.4, success=False)  # success says no: the score decides
    _, below = game_trajectory(1200.0, 0.3, success=True)
    assert [s.name for s, _ in above if s != TOPICS.scored and s != TOPICS.rl] == [TOPICS.sft.name]
    assert [s.name for s, _ in below if s != TOPICS.scored and s != TOPICS.rl] == [TOPICS.ct.name]
    assert above[0][1].verdict == 1 and below[0][1].verdict == 0


def test_a_games_length_costs_nothing_a_judged_tasks_does():
    """A game's steps are how long it survived (a snake alive at step 300 did well): no length
    penalty, which charged every death by the time lived; a MiniWoB++ task keeps its own."""
    _, game = game_trajectory(10.0, 0.45, success=False)
    _, plain = game_trajectory(None, None, success=True)
    assert game[0][1].components["length"] == 0.0
    assert plain[0][1].components["length"] < 0.0
