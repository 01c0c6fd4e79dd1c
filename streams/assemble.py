"""Episode assembly: step events in, exactly one Trajectory per episode out (pure functions).

``add_event(state, event, now)`` folds one event of flywheel.steps.v1 into the episode's
``EpisodeState`` and returns the trajectory when the episode is complete. Invariants:

- a step is identified by (episode_id, step_index): a second copy is dropped and counted in
  ``duplicates_dropped`` (at-least-once producers and replays make copies; the first wins);
- steps are kept ordered by ``step_index`` whatever order they arrive in;
- an episode is emitted once, when its ``started`` event, its terminal event (ended/aborted) and
  every step index below the terminal event's ``num_steps`` have been seen. A terminal event that
  arrives before some of its steps waits for them (late steps are ordered in) up to the idle
  timeout, after which ``close_abandoned`` emits it with the gap in ``missing_steps``;
- after emission the state is a tombstone: anything arriving later for that episode is a
  duplicate and is dropped (the trajectory is never emitted twice by this function).

Abandoned episodes (no event for ``idle_s`` and no terminal event) are closed as aborted with
reason "abandoned" and ``infra_failure=True``: the usual cause is a rollout worker or sandbox
that died without publishing its end, which says nothing about the policy, so the router keeps
such trajectories out of RL (they are never trained on as a zero reward).

``sweep(states, now, ...)`` is the abandoned-episode timer's decision over a whole table: which
episodes to close (and how) and which tombstones to forget. The timer only applies it.

``now`` is the processing clock (seconds), passed in so the functions stay pure.
"""

from __future__ import annotations

from collections.abc import Container, Mapping
from dataclasses import dataclass
from typing import Annotated, Union

from pydantic import Field

from schemas.base import Id, Model
from schemas.events import EpisodeAborted, EpisodeEnded, EpisodeStarted, Step, Trajectory

End = Annotated[Union[EpisodeEnded, EpisodeAborted], Field(discriminator="kind")]
ABANDONED = "abandoned"


class AssemblyError(ValueError):
    """An event that cannot belong to this state (wrong episode id)."""


class EpisodeState(Model):
    """What the assembler knows about one episode (the value of its table, keyed by episode id)."""

    episode_id: Id
    started: EpisodeStarted | None = None
    steps: list[Step] = Field(default_factory=list)  # sorted by step_index, unique
    end: End | None = None
    duplicates_dropped: int = 0
    last_event_ts: float = 0.0  # the producer's clock: latest event ts seen
    last_seen: float = 0.0  # the processing clock: when an event last arrived
    emitted: bool = False
    emitted_at: float = 0.0
    partition: int = -1  # Kafka partition of its events; set by the stream agent, not used here
    last_offset: int = -1  # offset of its latest event on that partition; set by the stream agent


def new_state(episode_id: str) -> EpisodeState:
    return EpisodeState(episode_id=episode_id)


def _expected_steps(state: EpisodeState) -> int:
    seen_max = state.steps[-1].step_index + 1 if state.steps else 0
    declared = state.end.num_steps if state.end is not None else 0
    return max(seen_max, declared)


def missing_steps(state: EpisodeState) -> list[int]:
    have = {s.step_index for s in state.steps}
    return [i for i in range(_expected_steps(state)) if i not in have]


def is_complete(state: EpisodeState) -> bool:
    return state.started is not None and state.end is not None and not missing_steps(state)


def _insert_step(steps: list[Step], step: Step) -> list[Step] | None:
    """The steps with ``step`` ordered in, or None if its index is already there."""
    out = list(steps)
    for i in range(len(out) - 1, -1, -1):  # late steps are rare: scan from the end
        idx = out[i].step_index
        if idx == step.step_index:
            return None
        if idx < step.step_index:
            out.insert(i + 1, step)
            return out
    out.insert(0, step)
    return out


def add_event(state: EpisodeState | None, event: EpisodeStarted | Step | EpisodeEnded | EpisodeAborted,
              now: float | None = None) -> tuple[EpisodeState, Trajectory | None]:
    """Fold ``event`` into ``state``; return the new state and the trajectory if it completed."""
    now = event.ts if now is None else now
    if state is None:
        state = new_state(event.episode_id)
    if event.episode_id != state.episode_id:
        raise AssemblyError(f"event of episode {event.episode_id!r} given to the state of {state.episode_id!r}")
    seen = {"last_seen": max(state.last_seen, now), "last_event_ts": max(state.last_event_ts, event.ts)}
    if state.emitted:
        return state.model_copy(update={**seen, "duplicates_dropped": state.duplicates_dropped + 1}), None

    update: dict = dict(seen)
    duplicate = False
    if isinstance(event, EpisodeStarted):
        duplicate = state.started is not None
        if not duplicate:
            update["started"] = event
    elif isinstance(event, Step):
        steps = _insert_step(state.steps, event)
        duplicate = steps is None
        if not duplicate:
            update["steps"] = steps
    else:
        duplicate = state.end is not None
        if not duplicate:
            update["end"] = event
    if duplicate:
        update["duplicates_dropped"] = state.duplicates_dropped + 1
    state = state.model_copy(update=update)
    if is_complete(state):
        return _emit(state, now)
    return state, None


def is_idle(state: EpisodeState, now: float, idle_s: float) -> bool:
    return not state.emitted and now - state.last_seen >= idle_s


def close_abandoned(state: EpisodeState, now: float, idle_s: float) -> tuple[EpisodeState, Trajectory | None]:
    """Close an episode that got no event for ``idle_s`` seconds.

    With a terminal event it is emitted as that status with its gaps in ``missing_steps``;
    without one it is emitted as aborted, reason "abandoned", ``infra_failure=True``. An
    episode whose ``started`` event was never seen cannot become a Trajectory (no task): the
    state is marked emitted and None is returned, so the caller dead-letters the state.
    """
    if not is_idle(state, now, idle_s):
        return state, None
    if state.started is None:
        return state.model_copy(update={"emitted": True, "emitted_at": now}), None
    return _emit(state, now)


def can_forget(state: EpisodeState, now: float, retention_s: float) -> bool:
    """An emitted tombstone older than ``retention_s`` can leave the table."""
    return state.emitted and now - state.emitted_at >= retention_s


@dataclass(frozen=True)
class Closure:
    """An idle episode to close: store ``after``; send ``trajectory``, or, when it is None (no
    started event was ever seen), dead-letter ``before``."""

    key: bytes
    before: EpisodeState
    after: EpisodeState
    trajectory: Trajectory | None


@dataclass(frozen=True)
class Sweep:
    closures: list[Closure]
    forget: list[bytes]  # emitted tombstones past their retention: delete from the table


def sweep(states: Mapping[bytes, EpisodeState], now: float, idle_s: float, retention_s: float,
          owned: Container[int]) -> Sweep:
    """What the abandoned-episode timer does to the table at ``now``. Only states of ``owned``
    partitions are touched (a standby copy is the active owner's business)."""
    closures, forget = [], []
    for key, state in states.items():
        if state.partition not in owned:
            continue
        if can_forget(state, now, retention_s):
            forget.append(key)
            continue
        after, trajectory = close_abandoned(state, now, idle_s)
        if after is not state:
            closures.append(Closure(key, state, after, trajectory))
    return Sweep(closures, forget)


def _emit(state: EpisodeState, now: float) -> tuple[EpisodeState, Trajectory]:
    trajectory = to_trajectory(state)
    # The tombstone keeps only what dedupe needs; the steps already left in the trajectory.
    tombstone = state.model_copy(update={"emitted": True, "emitted_at": now, "steps": []})
    return tombstone, trajectory


def to_trajectory(state: EpisodeState) -> Trajectory:
    started, end = state.started, state.end
    if started is None:
        raise AssemblyError(f"episode {state.episode_id!r} has no started event")
    if isinstance(end, EpisodeEnded):
        status, outcome, success, reason, infra = "ended", end.outcome_reward, end.success, end.reason, False
    elif isinstance(end, EpisodeAborted):
        status, outcome, success, reason, infra = "aborted", 0.0, False, end.reason, end.infra_failure
    else:
        status, outcome, success, reason, infra = "aborted", 0.0, False, ABANDONED, True
    return Trajectory(
        episode_id=state.episode_id, task=started.task, sandbox=started.sandbox,
        worker_id=started.worker_id, policy=started.policy, steps=list(state.steps),
        status=status, outcome_reward=outcome, success=success, end_reason=reason,
        infra_failure=infra, started_at=started.ts,
        ended_at=end.ts if end is not None else max(state.last_event_ts, started.ts),
        duplicates_dropped=state.duplicates_dropped, missing_steps=missing_steps(state),
        # a game's final and normalised score, as its ended event reports them (None otherwise)
        score=end.score if isinstance(end, EpisodeEnded) else None,
        normalised_score=end.normalised_score if isinstance(end, EpisodeEnded) else None,
    )
