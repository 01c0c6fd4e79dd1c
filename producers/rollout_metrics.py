"""What the rollout worker shows on /metrics, read off the events it publishes (one pure
function of each event: nothing else in the worker needs to know the metrics exist)."""

from __future__ import annotations

from typing import Any

from infra.runtime.metrics import ProcessMetrics
from schemas.events import EpisodeAborted, EpisodeEnded, Step


def observe(metrics: ProcessMetrics, event: Any, task: str) -> None:
    """Count ``event`` of an episode of ``task`` (a step, or how the episode ended)."""
    if isinstance(event, Step):
        metrics["flywheel_rollout_steps_total"].labels(task=task).inc()
        metrics["flywheel_rollout_policy_latency_seconds"].observe(event.latency_policy_ms / 1000)
        metrics["flywheel_rollout_env_latency_seconds"].observe(event.latency_env_ms / 1000)
        metrics["flywheel_rollout_policy_version"].labels(policy=event.policy).set(event.policy_version)
    elif isinstance(event, EpisodeEnded):
        outcome = "success" if event.success else "failure"
        metrics["flywheel_rollout_episodes_total"].labels(task=task, outcome=outcome).inc()
    elif isinstance(event, EpisodeAborted):
        metrics["flywheel_rollout_episodes_total"].labels(task=task, outcome="aborted").inc()
