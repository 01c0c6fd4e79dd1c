"""Pure mapping from decoded events to ClickHouse rows.

``kind`` is the catalog attribute of the topic the event came from (``steps``, ``trajectories``,
``scored``, ``policy``, ``metrics``, ``pairs``, ``dlq``). Every event becomes exactly one row of one table:

- ``row_for(kind, event) -> (table, values)``: the row as a tuple in ``COLUMNS[table]`` order
  (the columns of the tables in ``infra/clickhouse/sql``), timestamps as DateTime64(3) ticks (integer
  milliseconds). This is what the sink buffers: tuples transpose to columns in one C call and
  ticks are written as they are, with no per-value conversion in the insert.
- ``rows_for(kind, event) -> {table: [row dict]}``: the same row keyed by column, timestamps as
  UTC datetimes, for readers (tests, docs).

Every row carries the event's ``event_id``, which the table dedupes on.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Callable

import orjson

from schemas.events import (
    DeadLetter, EpisodeAborted, EpisodeEnded, EpisodeStarted, PolicyVersion, PreferencePair, ScoredTrajectory,
    Step, TrainerMetrics, Trajectory,
)

Row = dict[str, Any]
Values = tuple[Any, ...]
EVENT_TYPE_BY_KIND = {
    "steps": "EpisodeEvent", "trajectories": "Trajectory", "scored": "ScoredTrajectory",
    "policy": "PolicyVersion", "metrics": "TrainerMetrics", "pairs": "PreferencePair", "dlq": "DeadLetter",
}
SINK_KINDS = tuple(EVENT_TYPE_BY_KIND)

COLUMNS: dict[str, tuple[str, ...]] = {
    "steps": (
        "event_id", "episode_id", "step_index", "ts", "started_at", "policy", "policy_version", "action_type",
        "action", "thought", "thought_chars", "thought_words", "raw_output", "parse_error", "logprob", "sampled",
        "value", "reward", "done", "latency_policy_ms", "latency_env_ms", "error", "instruction", "screenshot_sha256",
        "screenshot_uri", "screen_width", "screen_height", "next_screenshot_sha256", "expert_action"),
    "episodes": (
        "event_id", "episode_id", "kind", "ts", "task_id", "task_name", "suite", "sandbox", "worker_id", "policy",
        "policy_version", "num_steps", "outcome_reward", "success", "reason", "infra_failure"),
    "trajectories": (
        "event_id", "episode_id", "task_id", "task_name", "suite", "instruction", "sandbox", "worker_id", "policy",
        "policy_version_min", "policy_version_max", "status", "num_steps", "outcome_reward", "success", "score",
        "normalised_score", "end_reason", "infra_failure", "started_at", "ended_at", "duration_s",
        "duplicates_dropped", "missing_steps"),
    "scored": (
        "event_id", "episode_id", "scorer", "scorer_version", "task_id", "task_name", "policy",
        "policy_version_min", "policy_version_max", "status", "num_steps", "success", "infra_failure", "reward",
        "components", "verdict", "rl_eligible", "routes", "route_reasons", "anomalies", "ended_at", "scored_at"),
    "policy_versions": (
        "event_id", "policy", "version", "kind", "uri", "sha256", "parent", "created_at", "metrics", "config"),
    "trainer_metrics": ("event_id", "run_id", "update", "policy", "policy_version", "ts", "metrics"),
    "pairs": (
        "event_id", "episode_id", "kind", "task_id", "task_name", "suite", "seed", "tau", "step_index", "instruction",
        "screenshot_sha256", "chosen_action_type", "chosen_action", "rejected_action_type", "rejected_action",
        "rejected_raw_output", "annotator", "policy", "policy_version", "created_at"),
    "dead_letters": (
        "event_id", "stage", "error_type", "message", "source_topic", "source_partition", "source_offset",
        "original_key", "original_value", "ts"),
}
TIME_COLUMNS = frozenset({"ts", "started_at", "ended_at", "created_at", "scored_at"})  # DateTime64(3, 'UTC')


def ticks(ts: float) -> int:
    """Seconds since the epoch -> DateTime64(3) ticks, truncated like a datetime would be."""
    return round(ts * 1_000_000) // 1000


def utc(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, timezone.utc)


def step_values(step: Step) -> Values:
    obs = step.observation
    action = step.action
    thought = step.thought
    return (
        step.event_id, step.episode_id, step.step_index, ticks(step.ts), ticks(step.started_at),
        step.policy, step.policy_version,
        action.type if action is not None else "", action.model_dump_json() if action is not None else "",
        thought, len(thought), len(thought.split()), step.raw_output, step.parse_error,
        step.logprob, step.sampled, step.value, step.reward, step.done, step.latency_policy_ms, step.latency_env_ms,
        step.error, obs.instruction, obs.screenshot.sha256, obs.screenshot.uri,
        obs.screen_width, obs.screen_height, step.next_screenshot_sha256,
        step.expert_action.model_dump_json() if step.expert_action is not None else "",
    )


def episode_values(event: EpisodeStarted | EpisodeEnded | EpisodeAborted) -> Values:
    head = (event.event_id, event.episode_id, event.kind, ticks(event.ts))
    if isinstance(event, EpisodeStarted):
        task = event.task
        return head + (task.task_id, task.name, task.suite, event.sandbox, event.worker_id, event.policy,
                       event.policy_version, None, None, None, "", None)
    if isinstance(event, EpisodeEnded):
        return head + ("", "", "", "", "", "", None, event.num_steps, event.outcome_reward, event.success,
                       event.reason, None)
    return head + ("", "", "", "", "", "", None, event.num_steps, None, None, event.reason, event.infra_failure)


def trajectory_values(traj: Trajectory) -> Values:
    lo, hi = traj.policy_versions
    task = traj.task
    return (
        traj.event_id, traj.episode_id, task.task_id, task.name, task.suite,
        traj.steps[0].observation.instruction if traj.steps else "",
        traj.sandbox, traj.worker_id, traj.policy, lo, hi, traj.status, len(traj.steps), traj.outcome_reward,
        traj.success, traj.score, traj.normalised_score, traj.end_reason, traj.infra_failure,
        ticks(traj.started_at), ticks(traj.ended_at),
        max(0.0, traj.ended_at - traj.started_at), traj.duplicates_dropped, list(traj.missing_steps),
    )


def scored_values(scored: ScoredTrajectory) -> Values:
    traj = scored.trajectory
    lo, hi = traj.policy_versions
    return (
        scored.event_id, traj.episode_id, scored.scorer, scored.scorer_version, traj.task.task_id,
        traj.task.name, traj.policy, lo, hi, traj.status, len(traj.steps), traj.success, traj.infra_failure,
        scored.reward, dict(scored.components), scored.verdict, scored.rl_eligible, list(scored.routes),
        list(scored.route_reasons), list(scored.anomalies), ticks(traj.ended_at), ticks(scored.scored_at),
    )


def policy_values(pv: PolicyVersion) -> Values:
    return (pv.event_id, pv.policy, pv.version, pv.kind, pv.uri, pv.sha256, pv.parent, ticks(pv.created_at),
            dict(pv.metrics), orjson.dumps(pv.config).decode())


def metrics_values(m: TrainerMetrics) -> Values:
    return (m.event_id, m.run_id, m.update, m.policy, m.policy_version, ticks(m.ts), dict(m.metrics))


def _action_columns(action) -> tuple[str, str]:
    return (action.type, action.model_dump_json()) if action is not None else ("", "")


def pair_values(p: PreferencePair) -> Values:
    rejected = p.rejected
    r_type, r_action = _action_columns(rejected.action) if rejected is not None else ("", None)
    return (p.event_id, p.episode_id, p.kind, p.task.task_id, p.task.name, p.task.suite, p.task.seed, p.tau,
            p.step_index, p.observation.instruction, p.observation.screenshot.sha256,
            *_action_columns(p.chosen.action), r_type, r_action,
            rejected.raw_output if rejected is not None else None, p.annotator, p.policy, p.policy_version,
            ticks(p.created_at))


def dead_letter_values(d: DeadLetter) -> Values:
    return (d.event_id, d.stage, d.error_type, d.message, d.source_topic, d.source_partition, d.source_offset,
            d.original_key, d.original_value, ticks(d.ts))


def _episode_event(event: Any) -> tuple[str, Values]:
    if isinstance(event, Step):
        return "steps", step_values(event)
    return "episodes", episode_values(event)


_MAPPERS: dict[str, Callable[[Any], tuple[str, Values]]] = {
    "steps": _episode_event,
    "trajectories": lambda e: ("trajectories", trajectory_values(e)),
    "scored": lambda e: ("scored", scored_values(e)),
    "policy": lambda e: ("policy_versions", policy_values(e)),
    "metrics": lambda e: ("trainer_metrics", metrics_values(e)),
    "pairs": lambda e: ("pairs", pair_values(e)),
    "dlq": lambda e: ("dead_letters", dead_letter_values(e)),
}


def row_for(kind: str, event: Any) -> tuple[str, Values]:
    """The table and the row (``COLUMNS[table]`` order) one event becomes. KeyError for an unknown kind."""
    return _MAPPERS[kind](event)


def as_dict(table: str, values: Values) -> Row:
    """A row keyed by column, with UTC datetimes for the timestamp columns."""
    return {c: (utc(v / 1000) if c in TIME_COLUMNS else v) for c, v in zip(COLUMNS[table], values)}


def rows_for(kind: str, event: Any) -> dict[str, list[Row]]:
    """The rows one event becomes, by table, keyed by column. Raises KeyError for a kind the sink does not read."""
    table, values = row_for(kind, event)
    return {table: [as_dict(table, values)]}
