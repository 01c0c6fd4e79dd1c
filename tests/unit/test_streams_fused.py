"""The fused stage of the Faust worker (streams.app.FusedChain): each trajectory the assembler or
the abandoned-episode sweep closes is scored and routed in process; every record still goes to
its declared topic; a stage that raises dead-letters its own input, named by that stage, at the
position it was published; a blocking stage's calls of one batch run concurrently.

The sender is a stand-in that records what would go to Kafka and answers each send with the
position the broker would give (the worker itself runs on the real broker in
tests/integration/test_streams_app.py)."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, replace

from infra.runtime.metrics import process_metrics
from infra.runtime.topics import TOPICS
from schemas.codec import decode
from schemas.events import DeadLetter, ScoredTrajectory, Trajectory
from streams.app import FusedChain, _apply_sweep
from streams.assemble import sweep
from streams.route import get_rule
from streams.score import make_scorer
from tests.fakes.steps import episode_events
from streams.topology import Stage, pipeline, run_keyed
from tests.unit.test_streams_topology import assembled

METRICS = process_metrics("streams")
NAMES = {spec.name: f"x.{spec.name}" for spec in (TOPICS.trajectories, TOPICS.scored, TOPICS.sft, TOPICS.ct,
                                                  TOPICS.rl, TOPICS.dlq)}


@dataclass
class Meta:
    topic: str
    partition: int
    offset: int


class Sender:
    """Records each send as (topic name, key, value, partition) and resolves its future with an offset."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes, bytes, int | None]] = []

    async def __call__(self, spec, key, value, partition=None):
        name = spec if isinstance(spec, str) else NAMES[spec.name]  # a str: the table's changelog
        offset = sum(1 for s in self.sent if s[0] == name)
        self.sent.append((name, key, value, partition))
        future = asyncio.get_running_loop().create_future()
        future.set_result(Meta(name, partition if partition is not None else 0, offset))
        return future

    def on(self, spec) -> list[tuple[str, bytes, bytes, int | None]]:
        return [s for s in self.sent if s[0] == NAMES[spec.name]]


def chain(scorer_fn=None, router_fn=None, blocking=False):
    _, score, route = pipeline(make_scorer("rule-v1"), get_rule("flywheel-v1"), {}, 4)
    if scorer_fn is not None:
        score = Stage("scorer", score.source, score.model, scorer_fn, score.outputs, blocking=blocking)
    if router_fn is not None:
        route = Stage("router", route.source, route.model, router_fn, route.outputs)
    return score, route


def publish(fused: FusedChain, closed) -> list:
    async def go():
        futures = await fused.publish(closed, 5.0)
        return [await f for f in futures]
    return asyncio.run(go())


def test_a_trajectory_is_published_scored_and_routed_on_its_partition():
    _, [(spec, traj)] = assembled(3, success=True)
    send = Sender()
    acks = publish(FusedChain(chain(), send, NAMES, blocking=False, metrics=METRICS), [(b"ep-1", 3, [(spec, traj)])])
    assert len(acks) == len(send.sent) == 4  # trajectory, scored, sft, rl
    assert [s[0] for s in send.sent] == [NAMES[TOPICS.trajectories.name], NAMES[TOPICS.scored.name], NAMES[TOPICS.sft.name], NAMES[TOPICS.rl.name]]
    assert {s[3] for s in send.sent} == {3} and {s[1] for s in send.sent} == {b"ep-1"}
    assert decode(send.on(TOPICS.trajectories)[0][2], Trajectory).event_id == traj.event_id
    scored = decode(send.on(TOPICS.scored)[0][2], ScoredTrajectory)
    assert scored.episode_id == traj.episode_id and scored.event_id
    assert decode(send.on(TOPICS.sft)[0][2], ScoredTrajectory).episode_id == traj.episode_id
    assert send.on(TOPICS.sft)[0][2] is send.on(TOPICS.rl)[0][2]  # one record, encoded once


def test_a_failing_scorer_dead_letters_the_trajectory_at_its_published_offset():
    _, [(spec, traj)] = assembled(3)

    def broken(record, now):
        raise RuntimeError("judge said no")

    send = Sender()
    send.sent.append((NAMES[TOPICS.trajectories.name], b"other", b"{}", 0))  # so the trajectory lands at offset 1
    publish(FusedChain(chain(scorer_fn=broken), send, NAMES, blocking=False, metrics=METRICS), [(b"ep-1", 0, [(spec, traj)])])
    assert len(send.on(TOPICS.trajectories)) == 2 and not send.on(TOPICS.scored) and not send.on(TOPICS.sft)
    [(_, key, value, _)] = send.on(TOPICS.dlq)
    letter = decode(value, DeadLetter)
    assert letter.stage == "scorer" and "judge said no" in letter.message
    assert (letter.source_topic, letter.source_partition, letter.source_offset) == (NAMES[TOPICS.trajectories.name], 0, 1)
    assert key == b"ep-1"


def test_a_failing_router_keeps_the_scored_record_and_names_the_router():
    _, [(spec, traj)] = assembled(2)

    def broken(record, now):
        raise ValueError("no rule for this")

    send = Sender()
    publish(FusedChain(chain(router_fn=broken), send, NAMES, blocking=False, metrics=METRICS), [(b"ep-1", 2, [(spec, traj)])])
    assert len(send.on(TOPICS.trajectories)) == 1 and len(send.on(TOPICS.scored)) == 1
    assert not send.on(TOPICS.sft) and not send.on(TOPICS.ct) and not send.on(TOPICS.rl)
    letter = decode(send.on(TOPICS.dlq)[0][2], DeadLetter)
    assert letter.stage == "router" and letter.source_topic == NAMES[TOPICS.scored.name] and letter.source_offset == 0
    assert decode(send.on(TOPICS.scored)[0][2], ScoredTrajectory).episode_id == traj.episode_id


def test_a_blocking_stage_runs_the_batch_concurrently():
    """Five judge calls that each wait for the other four: they finish only if run side by side."""
    barrier = threading.Barrier(5, timeout=10)
    real, _ = chain()

    def judge(record, now):
        barrier.wait()
        return real.fn(record, now)

    closed = []
    for i in range(5):
        _, [(spec, traj)] = assembled(2)
        traj = traj.model_copy(update={"episode_id": f"ep-{i}"})
        closed.append((f"ep-{i}".encode(), i, [(spec, traj)]))
    send = Sender()
    publish(FusedChain(chain(scorer_fn=judge, blocking=True), send, NAMES, blocking=True, metrics=METRICS), closed)
    assert len(send.on(TOPICS.scored)) == 5 and not send.on(TOPICS.dlq)


class Table:
    def __init__(self, data) -> None:
        self.data = data


def test_the_abandoned_episode_sweep_scores_and_routes_what_it_closes():
    assemble, _, _ = pipeline(make_scorer("rule-v1"), get_rule("flywheel-v1"), {}, 4)
    state = None
    for ev in episode_events("ep-9", 3, success=True)[:-1]:  # no ended event
        state, _ = run_keyed(assemble, state, ev, 1000.0)
    state = state.model_copy(update={"partition": 1, "last_offset": 7})
    table = Table({b"ep-9": state})
    decision = sweep(table.data, 5000.0, 300.0, 3600.0, {1})
    assert decision.closures
    send = Sender()
    asyncio.run(_apply_sweep(decision, table, "x.steps", send, FusedChain(chain(), send, NAMES, False, METRICS), 5000.0))
    assert len(send.on(TOPICS.trajectories)) == 1 and len(send.on(TOPICS.scored)) == 1
    assert send.on(TOPICS.ct) or send.on(TOPICS.sft)
    assert decode(send.on(TOPICS.scored)[0][2], ScoredTrajectory).episode_id == "ep-9"


def test_an_episode_whose_record_exceeds_its_topic_limit_is_one_dead_letter_not_a_stopped_worker():
    """The broker refuses a record over max.message.bytes and the worker would stop on it at every
    restart: the episode's records are not sent, one dead letter names the stage that made it."""
    _, [(spec, traj)] = assembled(3)
    small = replace(spec, max_message_bytes=2000)  # this trajectory encodes to more than that
    send = Sender()
    fused = FusedChain(chain(), send, NAMES, blocking=False, metrics=METRICS)
    acks = publish(fused, [(b"ep-big", 1, [(small, traj)]), (b"ep-ok", 2, assembled(2)[1])])
    [(_, key, value, partition)] = send.on(TOPICS.dlq)
    letter = decode(value, DeadLetter)
    assert key == b"ep-big" and partition is None and letter.stage == "assembler"
    assert "max.message.bytes" in letter.message and letter.original_size > 2000
    assert letter.source_topic == NAMES[TOPICS.trajectories.name] and letter.source_partition == 1
    assert {s[1] for s in send.sent if s[0] != NAMES[TOPICS.dlq.name]} == {b"ep-ok"}  # the other episode flows on
    assert len(acks) == len(send.sent)
    assert [fused._maker_of(t) for t in (TOPICS.trajectories, TOPICS.scored, TOPICS.rl)] == ["assembler", "scorer", "router"]
