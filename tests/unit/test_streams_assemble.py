"""Episode assembly: duplicates, late steps, one emission, abandoned episodes."""

from __future__ import annotations

from hypothesis import given, settings, strategies as st

from schemas.codec import decode, encode
from schemas.events import Trajectory
from streams.assemble import EpisodeState, add_event, can_forget, close_abandoned
from tests.fakes.steps import episode_events


def run(events, now=1000.0):
    state, out = None, []
    for ev in events:
        state, traj = add_event(state, ev, now)
        if traj is not None:
            out.append(traj)
    return state, out


def test_in_order_episode_emits_one_trajectory():
    events = episode_events("ep-1", 4)
    state, out = run(events)
    assert len(out) == 1
    traj = out[0]
    assert [s.step_index for s in traj.steps] == [0, 1, 2, 3]
    assert traj.status == "ended" and traj.success and traj.outcome_reward == 1.0
    assert traj.missing_steps == [] and traj.duplicates_dropped == 0
    assert traj.started_at == events[0].ts and traj.ended_at == events[-1].ts
    assert state.emitted and state.steps == []


def test_events_after_emission_are_dropped_as_duplicates():
    events = episode_events("ep-1", 2)
    state, out = run(events + events)
    assert len(out) == 1
    assert state.duplicates_dropped == len(events)


def test_end_before_late_steps_waits_for_them():
    events = episode_events("ep-1", 3)
    reordered = [events[0], events[-1], events[3], events[1], events[2]]
    state, out = run(reordered)
    assert len(out) == 1
    assert [s.step_index for s in out[0].steps] == [0, 1, 2]


def test_gap_is_recorded_when_closed_by_idle_timeout():
    events = episode_events("ep-1", 4)
    del events[2]  # step 1 never arrives
    state, out = run(events, now=10.0)
    assert out == []
    state, traj = close_abandoned(state, now=11.0, idle_s=5.0)
    assert traj is None  # not idle yet
    state, traj = close_abandoned(state, now=20.0, idle_s=5.0)
    assert traj.status == "ended" and traj.missing_steps == [1]


def test_abandoned_episode_is_an_infra_abort():
    events = episode_events("ep-1", 3)[:-1]  # no end event
    state, _ = run(events, now=10.0)
    state, traj = close_abandoned(state, now=100.0, idle_s=30.0)
    assert traj.status == "aborted" and traj.end_reason == "abandoned" and traj.infra_failure
    assert len(traj.steps) == 3 and traj.ended_at == events[-1].ts
    assert close_abandoned(state, now=200.0, idle_s=30.0)[1] is None  # once only
    assert can_forget(state, now=100.0 + 3600, retention_s=600)


def test_abandoned_without_started_yields_nothing():
    events = episode_events("ep-1", 2)[1:-1]
    state, _ = run(events, now=10.0)
    state, traj = close_abandoned(state, now=100.0, idle_s=30.0)
    assert traj is None and state.emitted


def test_aborted_keeps_infra_flag():
    _, out = run(episode_events("ep-1", 2, aborted=True, infra_failure=True))
    assert out[0].status == "aborted" and out[0].infra_failure and out[0].end_reason == "browser crashed"


def test_state_roundtrips_through_the_codec():
    events = episode_events("ep-1", 3)[:-1]
    state, _ = run(events)
    assert decode(encode(state), EpisodeState) == state


def _canonical(traj: Trajectory) -> Trajectory:
    return traj.model_copy(update={"duplicates_dropped": 0})


@settings(max_examples=60, deadline=None)
@given(n_steps=st.integers(0, 6), data=st.data())
def test_any_order_with_duplicates_assembles_the_same_trajectory(n_steps, data):
    events = episode_events("ep-h", n_steps)
    (expected,) = run(events)[1]
    extra = data.draw(st.lists(st.sampled_from(events), max_size=6), label="duplicates")
    shuffled = data.draw(st.permutations(events + extra), label="order")
    _, out = run(shuffled)
    assert len(out) == 1
    assert _canonical(out[0]) == _canonical(expected)
    assert out[0].duplicates_dropped <= len(extra)
