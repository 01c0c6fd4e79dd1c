"""The stream topology, declared once: every stage's step id, input topic, pure function, output
topics and dead-letter branch.

    flywheel.steps.v1        --assembler (keyed: one EpisodeState per episode)--> flywheel.trajectories.v1
    flywheel.trajectories.v1 --scorer--> flywheel.scored.v1
    flywheel.scored.v1       --router--> flywheel.sft.v1 | flywheel.ct.v1 | flywheel.rl.v1
    any stage, a record it cannot process --> flywheel.dlq.v1 (stage = the step id)

Read it like Bytewax's ``op.map("step_id", ...)`` with errors as a second stream, or Quix's
``sdf.apply(...)`` ... ``sdf.to_topic(...)``. Runners only move bytes, and both run the stages
fused, the way Kafka Streams fuses sub-topologies that share a key: the Faust worker
(streams.app) consumes each step event once and runs assembler -> scorer -> router in process
(``run_keyed``, then ``run_chain`` on each trajectory), still publishing every intermediate
record to its declared topic for outside consumers; the re-scoring replay (streams.rescore)
runs the same ``run_chain`` of scorer and router from history. A runner's loop is: decode the
input (``Stage.model``), call the stage functions, encode and send what comes back to the
topics they name, and send whatever raised to ``Stage.dlq`` with the failing stage's
``step_id`` as the dead letter's stage (``StageFailed`` says which). Nothing here touches
Kafka, so each stage is tested with plain objects.

A stage's ``outputs`` are the topics it may write; a record its function routes elsewhere is
held back (``run`` drops it). That is how the replay leaves flywheel.rl.v1 out unless asked.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from infra.runtime.topics import TOPICS, TopicSpec
from schemas.codec import encode
from schemas.events import EpisodeEvent, ScoredTrajectory, Trajectory
from streams.assemble import EpisodeState, add_event
from streams.route import RoutingRule
from streams.score import Scorer

Output = tuple[TopicSpec, Any]  # (topic spec, schema object to encode and send)


@dataclass(frozen=True)
class Stage:
    step_id: str  # the stage's name: agent name, and the dead letter's ``stage``
    source: TopicSpec
    model: Any  # the schema type its input records decode to
    fn: Callable[..., Any]  # stateless: fn(record, now) -> outputs; keyed: fn(state, record, now) -> (state, outputs)
    outputs: tuple[TopicSpec, ...]
    keyed: bool = False  # keeps one state per key (a table, rebuilt from its changelog)
    blocking: bool = False  # the function blocks on I/O (an HTTP judge): run it off the event loop
    dlq: TopicSpec = TOPICS.dlq


def _assemble(state: EpisodeState | None, event, now: float) -> tuple[EpisodeState, list[Output]]:
    state, trajectory = add_event(state, event, now)
    return state, [] if trajectory is None else [(TOPICS.trajectories, trajectory)]


def pipeline(scorer: Scorer, rule: RoutingRule, latest: Mapping[str, int], max_staleness: int,
             to_rl: bool = True) -> tuple[Stage, Stage, Stage]:
    """The three stages. ``latest`` (policy name -> newest version) is read at call time, so a
    live mapping (the Faust app's policy table) keeps the router current; ``to_rl=False`` leaves
    flywheel.rl.v1 out of the router's outputs."""
    routed = (TOPICS.sft, TOPICS.ct) + ((TOPICS.rl,) if to_rl else ())
    return (
        Stage("assembler", TOPICS.steps, EpisodeEvent, _assemble, (TOPICS.trajectories,), keyed=True),
        Stage("scorer", TOPICS.trajectories, Trajectory, lambda traj, now: [(TOPICS.scored, scorer.score(traj, now))],
              (TOPICS.scored,), blocking=scorer.judge is not None),
        Stage("router", TOPICS.scored, ScoredTrajectory,
              lambda scored, now: rule(scored, latest, max_staleness).records, routed),
    )


def _declared(stage: Stage, outputs: list[Output]) -> list[Output]:
    return [(spec, rec) for spec, rec in outputs if spec in stage.outputs]


def run(stage: Stage, record, now: float) -> list[Output]:
    """One record through a stateless stage: the outputs it declares (raises on bad input)."""
    return _declared(stage, stage.fn(record, now))


def run_keyed(stage: Stage, state, record, now: float) -> tuple[Any, list[Output]]:
    """One record through a keyed stage: its new state and outputs (raises on bad input)."""
    state, outputs = stage.fn(state, record, now)
    return state, _declared(stage, outputs)


class StageFailed(Exception):
    """A stage of a fused chain raised: which one, on what record, and what the stages before it
    had already emitted (those outputs are valid: the runner may still send them)."""

    def __init__(self, stage: Stage, record: Any, cause: BaseException, emitted: list[Output]) -> None:
        super().__init__(f"{stage.step_id}: {cause}")
        self.stage, self.record, self.cause, self.emitted = stage, record, cause, emitted


def run_chain(stages: tuple[Stage, ...], record, now: float) -> list[Output]:
    """``record`` through consecutive stateless stages fused in memory: every output of a stage
    is emitted, and the ones on the next stage's input topic are also fed to it directly (no
    re-decode). Raises ``StageFailed`` on the first failure, naming the stage, so the runner
    dead-letters that stage's input (or the input record whole)."""
    emitted, todo = [], [record]
    for i, stage in enumerate(stages):
        outputs = []
        for rec in todo:
            try:
                outputs += run(stage, rec, now)
            except Exception as exc:  # noqa: BLE001 - any error is the stage's DLQ branch
                raise StageFailed(stage, rec, exc, emitted + outputs) from exc
        emitted += outputs
        nxt = stages[i + 1].source if i + 1 < len(stages) else None
        todo = [rec for spec, rec in outputs if spec == nxt]
    return emitted


def encoded(outputs: list[Output]) -> list[tuple[TopicSpec, bytes]]:
    """(spec, bytes) for each output; a record routed to several topics is encoded once."""
    cache: dict[int, bytes] = {}
    return [(spec, cache[id(rec)] if id(rec) in cache else cache.setdefault(id(rec), encode(rec)))
            for spec, rec in outputs]
