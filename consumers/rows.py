"""Pure mapping from decoded events to ClickHouse rows: ``rows_for(kind, event)``.

``kind`` is the catalog attribute of the topic the event came from (``steps``, ``trajectories``,
``scored``, ``policy``, ``metrics``, ``dlq``). The result maps a table name to its rows, each a
dict keyed by column (the columns of ``infra/sql/001_tables.sql``). Every row carries the
event's ``event_id``, which the table dedupes on.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Callable

import orjson

from schemas.events import (
    DeadLetter, EpisodeAborted, EpisodeEnded, EpisodeStarted, PolicyVersion, ScoredTrajectory, Step,
    TrainerMetrics, Trajectory,
)

Row = dict[str, Any]
EVENT_TYPE_BY_KIND = {
    "steps": "EpisodeEvent", "trajectories": "Trajectory", "scored": "ScoredTrajectory",
    "policy": "PolicyVersion", "metrics": "TrainerMetrics", "dlq": "DeadLetter",
}
SINK_KINDS = tuple(EVENT_TYPE_BY_KIND)


def utc(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, timezone.utc)


def step_row(step: Step) -> Row:
    obs = step.observation
    return {
        "event_id": step.event_id, "episode_id": step.episode_id, "step_index": step.step_index,
        "ts": utc(step.ts), "started_at": utc(step.started_at),
        "policy": step.policy, "policy_version": step.policy_version,
        "action_type": step.action.type if step.action is not None else "",
        "action": step.action.model_dump_json() if step.action is not None else "",
        "thought": step.thought, "thought_chars": len(step.thought), "thought_words": len(step.thought.split()),
        "raw_output": step.raw_output, "parse_error": step.parse_error,
        "logprob": step.logprob, "value": step.value, "reward": step.reward, "done": step.done,
        "latency_policy_ms": step.latency_policy_ms, "latency_env_ms": step.latency_env_ms,
        "error": step.error, "instruction": obs.instruction,
        "screenshot_sha256": obs.screenshot.sha256, "screenshot_uri": obs.screenshot.uri,
        "screen_width": obs.screen_width, "screen_height": obs.screen_height,
        "next_screenshot_sha256": step.next_screenshot_sha256,
    }


def _episode_row(event: EpisodeStarted | EpisodeEnded | EpisodeAborted) -> Row:
    row: Row = {
        "event_id": event.event_id, "episode_id": event.episode_id, "kind": event.kind, "ts": utc(event.ts),
        "task_id": "", "task_name": "", "suite": "", "sandbox": "", "worker_id": "", "policy": "",
        "policy_version": None, "num_steps": None, "outcome_reward": None, "success": None,
        "reason": "", "infra_failure": None,
    }
    if isinstance(event, EpisodeStarted):
        row.update(task_id=event.task.task_id, task_name=event.task.name, suite=event.task.suite,
                   sandbox=event.sandbox, worker_id=event.worker_id, policy=event.policy,
                   policy_version=event.policy_version)
    elif isinstance(event, EpisodeEnded):
        row.update(num_steps=event.num_steps, outcome_reward=event.outcome_reward, success=event.success,
                   reason=event.reason)
    else:
        row.update(num_steps=event.num_steps, reason=event.reason, infra_failure=event.infra_failure)
    return row


def episode_event_rows(event: Any) -> dict[str, list[Row]]:
    if isinstance(event, Step):
        return {"steps": [step_row(event)]}
    return {"episodes": [_episode_row(event)]}


def trajectory_row(traj: Trajectory) -> Row:
    lo, hi = traj.policy_versions
    return {
        "event_id": traj.event_id, "episode_id": traj.episode_id, "task_id": traj.task.task_id,
        "task_name": traj.task.name, "suite": traj.task.suite,
        "instruction": traj.steps[0].observation.instruction if traj.steps else "",
        "sandbox": traj.sandbox, "worker_id": traj.worker_id, "policy": traj.policy,
        "policy_version_min": lo, "policy_version_max": hi, "status": traj.status,
        "num_steps": len(traj.steps), "outcome_reward": traj.outcome_reward, "success": traj.success,
        "end_reason": traj.end_reason, "infra_failure": traj.infra_failure,
        "started_at": utc(traj.started_at), "ended_at": utc(traj.ended_at),
        "duration_s": max(0.0, traj.ended_at - traj.started_at),
        "duplicates_dropped": traj.duplicates_dropped, "missing_steps": list(traj.missing_steps),
    }


def scored_row(scored: ScoredTrajectory) -> Row:
    traj = scored.trajectory
    lo, hi = traj.policy_versions
    return {
        "event_id": scored.event_id, "episode_id": traj.episode_id, "scorer": scored.scorer,
        "scorer_version": scored.scorer_version, "task_id": traj.task.task_id, "task_name": traj.task.name,
        "policy": traj.policy, "policy_version_min": lo, "policy_version_max": hi, "status": traj.status,
        "num_steps": len(traj.steps), "success": traj.success, "infra_failure": traj.infra_failure,
        "reward": scored.reward, "components": dict(scored.components), "verdict": scored.verdict,
        "rl_eligible": scored.rl_eligible, "routes": list(scored.routes),
        "route_reasons": list(scored.route_reasons), "anomalies": list(scored.anomalies),
        "ended_at": utc(traj.ended_at), "scored_at": utc(scored.scored_at),
    }


def policy_row(pv: PolicyVersion) -> Row:
    return {
        "event_id": pv.event_id, "policy": pv.policy, "version": pv.version, "kind": pv.kind, "uri": pv.uri,
        "sha256": pv.sha256, "parent": pv.parent, "created_at": utc(pv.created_at),
        "metrics": dict(pv.metrics), "config": orjson.dumps(pv.config).decode(),
    }


def metrics_row(m: TrainerMetrics) -> Row:
    return {
        "event_id": m.event_id, "run_id": m.run_id, "update": m.update, "policy": m.policy,
        "policy_version": m.policy_version, "ts": utc(m.ts), "metrics": dict(m.metrics),
    }


def dead_letter_row(d: DeadLetter) -> Row:
    return {
        "event_id": d.event_id, "stage": d.stage, "error_type": d.error_type, "message": d.message,
        "source_topic": d.source_topic, "source_partition": d.source_partition,
        "source_offset": d.source_offset, "original_key": d.original_key,
        "original_value": d.original_value, "ts": utc(d.ts),
    }


_MAPPERS: dict[str, Callable[[Any], dict[str, list[Row]]]] = {
    "steps": episode_event_rows,
    "trajectories": lambda e: {"trajectories": [trajectory_row(e)]},
    "scored": lambda e: {"scored": [scored_row(e)]},
    "policy": lambda e: {"policy_versions": [policy_row(e)]},
    "metrics": lambda e: {"trainer_metrics": [metrics_row(e)]},
    "dlq": lambda e: {"dead_letters": [dead_letter_row(e)]},
}


def rows_for(kind: str, event: Any) -> dict[str, list[Row]]:
    """The rows one event becomes, by table. Raises KeyError for a kind the sink does not read."""
    return _MAPPERS[kind](event)
