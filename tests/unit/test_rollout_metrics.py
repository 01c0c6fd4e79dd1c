"""The rollout worker's /metrics, read off the events it publishes (producers.rollout_metrics)."""

from __future__ import annotations

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from infra.runtime.metrics import process_metrics
from producers.rollout_metrics import observe
from schemas.events import EpisodeAborted
from tests.fakes.steps import episode_events


def samples(metrics) -> dict:
    text = generate_latest(metrics.registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def test_steps_latencies_and_outcomes_are_counted_per_task():
    metrics = process_metrics("rollout")
    won = episode_events("a", 3, success=True)
    lost = episode_events("b", 2, success=False)
    steps = [e for e in won + lost if e.kind == "step"]
    steps = [s.model_copy(update={"latency_policy_ms": 20.0, "latency_env_ms": 300.0}) for s in steps]
    for ev in [won[0], *steps[:3], won[-1]]:
        observe(metrics, ev, "click-test")
    for ev in [lost[0], *steps[3:], lost[-1]]:
        observe(metrics, ev, "click-test-2")
    observe(metrics, EpisodeAborted(episode_id="c", ts=1.0, num_steps=0, reason="sandbox crashed",
                                    infra_failure=True), "click-test")
    got = samples(metrics)
    assert got[("flywheel_rollout_steps_total", (("task", "click-test"),))] == 3
    assert got[("flywheel_rollout_steps_total", (("task", "click-test-2"),))] == 2
    assert got[("flywheel_rollout_episodes_total", (("outcome", "success"), ("task", "click-test")))] == 1
    assert got[("flywheel_rollout_episodes_total", (("outcome", "failure"), ("task", "click-test-2")))] == 1
    assert got[("flywheel_rollout_episodes_total", (("outcome", "aborted"), ("task", "click-test")))] == 1
    assert got[("flywheel_rollout_policy_latency_seconds_count", ())] == 5
    assert got[("flywheel_rollout_policy_latency_seconds_bucket", (("le", "0.025"),))] == 5  # 20 ms each
    assert got[("flywheel_rollout_env_latency_seconds_bucket", (("le", "0.25"),))] == 0  # 300 ms each
    assert got[("flywheel_rollout_env_latency_seconds_sum", ())] == 1.5
    assert got[("flywheel_rollout_policy_version", (("policy", steps[0].policy),))] == steps[-1].policy_version
