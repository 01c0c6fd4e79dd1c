"""The declared topology: stages, their topics, fused re-scoring, the RL branch, and the
abandoned-episode sweep as a pure decision."""

from __future__ import annotations

from infra.runtime.topics import TOPICS
from schemas.codec import decode, encode
from schemas.events import ScoredTrajectory
from streams.assemble import EpisodeState, add_event, sweep
from streams.route import get_rule
from streams.score import make_scorer
from tests.fakes.steps import episode_events
from streams.topology import encoded, pipeline, run, run_chain, run_keyed


def stages(to_rl: bool = True, latest=None):
    return pipeline(make_scorer("rule-v1"), get_rule("flywheel-v1"), latest or {}, 4, to_rl=to_rl)


def assembled(n_steps: int = 3, success: bool = True):
    assemble, _, _ = stages()
    state, outputs = None, []
    for ev in episode_events("ep-1", n_steps, success=success):
        state, out = run_keyed(assemble, state, ev, 1000.0)
        outputs += out
    return state, outputs


def test_the_pipeline_is_declared_once_with_chained_topics():
    assemble, score, route = stages()
    assert [s.step_id for s in (assemble, score, route)] == ["assembler", "scorer", "router"]
    assert assemble.source == TOPICS.steps and assemble.outputs == (TOPICS.trajectories,) and assemble.keyed
    assert score.source == TOPICS.trajectories and score.outputs == (TOPICS.scored,)
    assert route.source == TOPICS.scored and route.outputs == (TOPICS.sft, TOPICS.ct, TOPICS.rl)
    assert all(s.dlq == TOPICS.dlq for s in (assemble, score, route))


def test_keyed_stage_emits_one_trajectory_when_the_episode_completes():
    state, outputs = assembled(3)
    assert state.emitted
    assert [(spec, traj.episode_id, len(traj.steps)) for spec, traj in outputs] == [(TOPICS.trajectories, "ep-1", 3)]


def test_chain_equals_the_stages_run_one_by_one():
    _, [(_, traj)] = assembled(3, success=True)
    _, score, route = stages()
    fused = run_chain((score, route), traj, 5.0)
    [(spec, scored)] = run(score, traj, 5.0)
    one_by_one = [(spec, scored)] + run(route, decode(encode(scored), ScoredTrajectory), 5.0)
    assert [s.name for s, _ in fused] == [s.name for s, _ in one_by_one] == [TOPICS.scored.name, TOPICS.sft.name,
                                                                              TOPICS.rl.name]
    assert [encode(r) for _, r in fused] == [encode(r) for _, r in one_by_one]


def test_without_the_rl_branch_nothing_reaches_rl():
    _, [(_, traj)] = assembled(3, success=False)
    _, score, route = stages(to_rl=False)
    out = run_chain((score, route), traj, 5.0)
    assert [s.name for s, _ in out] == [TOPICS.scored.name, TOPICS.ct.name]


def test_a_failing_input_raises_so_the_runner_dead_letters_it():
    _, score, _ = stages()
    try:
        run_chain((score,), object(), 1.0)
    except Exception as exc:  # noqa: BLE001 - any error is the DLQ branch
        assert exc is not None
    else:
        raise AssertionError("a bad record went through")


def test_a_record_routed_to_two_topics_is_encoded_once():
    _, [(_, traj)] = assembled(2)
    _, score, route = stages()
    out = encoded(run_chain((score, route), traj, 1.0))
    assert out[1][1] is out[2][1]  # sft and rl carry the same bytes object


def _state(episode: str, partition: int, **kw) -> EpisodeState:
    return EpisodeState(episode_id=episode, partition=partition, **kw)


def test_sweep_closes_idle_episodes_forgets_old_tombstones_and_skips_standby_copies():
    started = episode_events("ep-open", 2)[:2]  # started + one step, no end
    open_state = None
    for ev in started:
        open_state, _ = add_event(open_state, ev, 100.0)
    open_state = open_state.model_copy(update={"partition": 0, "last_offset": 7})
    states = {
        b"ep-open": open_state,
        b"ep-no-start": _state("ep-no-start", 0, last_seen=100.0, last_offset=9),
        b"ep-fresh": _state("ep-fresh", 0, last_seen=990.0),
        b"ep-old-tombstone": _state("ep-old-tombstone", 0, emitted=True, emitted_at=10.0),
        b"ep-standby": _state("ep-standby", 1, last_seen=100.0),
    }
    decision = sweep(states, now=1000.0, idle_s=300.0, retention_s=600.0, owned={0})
    closed = {c.key: c for c in decision.closures}
    assert set(closed) == {b"ep-open", b"ep-no-start"}
    traj = closed[b"ep-open"].trajectory
    assert traj.status == "aborted" and traj.end_reason == "abandoned" and traj.infra_failure
    assert closed[b"ep-open"].after.emitted and closed[b"ep-open"].before is open_state
    assert closed[b"ep-no-start"].trajectory is None and closed[b"ep-no-start"].after.emitted
    assert decision.forget == [b"ep-old-tombstone"]
    assert states[b"ep-open"] is open_state  # the decision changes nothing by itself


def test_each_abandoned_dead_letter_has_its_own_id():
    from infra.runtime.dlq import dead_letter

    states = {f"ep-{i}".encode(): _state(f"ep-{i}", 0, last_seen=1.0, last_offset=100 + i) for i in range(3)}
    decision = sweep(states, now=1000.0, idle_s=300.0, retention_s=600.0, owned={0})
    letters = [dead_letter("assembler", ValueError("abandoned"), "flywheel.steps.v1", c.before.partition,
                           c.before.last_offset, c.key, encode(c.before)) for c in decision.closures]
    assert len({letter.event_id for letter in letters}) == 3
