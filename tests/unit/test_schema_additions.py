"""Optional fields added to an event after its consumers were written stay out of the records
that do not use them, so an older strict consumer (unknown fields are errors) still reads every
record that is not a game's: a Faust worker of the previous release dead-lettered every ended
event while `score: null` was written."""

from __future__ import annotations

import orjson

from schemas.codec import decode, encode
from schemas.events import EpisodeEvent, ScoredTrajectory, Trajectory
from streams.route import get_rule
from streams.score import make_scorer
from tests.fakes.steps import episode_events
from streams.topology import pipeline, run_chain, run_keyed

ADDED = {"score", "normalised_score"}


def records(score=None, normalised=None):
    assemble, score_stage, route = pipeline(make_scorer("rule-v1"), get_rule("flywheel-v1"), {}, 4)
    events = episode_events("e-1", 2)
    events[-1] = events[-1].model_copy(update={"score": score, "normalised_score": normalised})
    state, out = None, []
    for ev in events:
        state, o = run_keyed(assemble, state, ev, 1.0)
        out += o
    [(_, traj)] = out
    scored = run_chain((score_stage,), traj, 2.0)[0][1]
    return events[-1], traj, scored


def test_records_without_a_score_carry_none_of_the_added_fields():
    ended, traj, scored = records()
    assert not ADDED & orjson.loads(encode(ended)).keys()
    assert not ADDED & orjson.loads(encode(traj)).keys()
    assert not ADDED & orjson.loads(encode(scored))["trajectory"].keys()
    assert decode(encode(ended), EpisodeEvent) == ended and decode(encode(traj), Trajectory) == traj


def test_a_games_records_carry_them_and_read_back():
    ended, traj, scored = records(1719.0, 1.0)
    assert orjson.loads(encode(ended))["score"] == 1719.0
    assert orjson.loads(encode(scored))["trajectory"]["normalised_score"] == 1.0
    assert decode(encode(scored), ScoredTrajectory).trajectory.score == 1719.0
