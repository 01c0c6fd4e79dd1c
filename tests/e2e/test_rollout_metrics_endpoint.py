"""`flywheel rollout` in a real browser serves /metrics: scraped over HTTP and parsed with
prometheus-client's parser while it runs, its counts match what it published."""

from __future__ import annotations

import pytest

from infra.runtime.topics import TOPICS
from producers.tasks import build_tasks, submit
from tests.e2e.browser_support import require_chromium
from tests.e2e.rollout_support import start_random_rollout, stop_with_sigterm, wait_for_episodes
from tests.e2e.test_rollout_worker import episodes_of, read_topic
from infra.runtime.procs import free_port
from tests.integration.test_metrics_endpoints import scrape

pytestmark = pytest.mark.e2e


def test_the_rollout_worker_serves_steps_latencies_and_outcomes(settings, group_id):
    require_chromium()
    submit(settings, build_tasks("miniwob", ["click-test"], 40, prefix="metrics", max_steps=3))
    port = free_port()
    proc, status_file = start_random_rollout(settings, group_id, "w-metrics", 1, FLYWHEEL_METRICS_PORT=str(port))
    try:
        live = scrape(port) if wait_for_episodes(status_file, 3, 90) else {}  # while it runs
    finally:
        out = stop_with_sigterm(proc)
    assert proc.returncode == 0, out[-3000:]
    assert live, "no 3 episodes within 90 s"
    steps = live[("flywheel_rollout_steps_total", (("task", "click-test"),))]
    episodes = sum(v for (name, _), v in live.items() if name == "flywheel_rollout_episodes_total")
    assert steps >= 3 and episodes >= 3
    assert live[("flywheel_rollout_env_latency_seconds_count", ())] == steps
    assert live[("flywheel_rollout_policy_latency_seconds_count", ())] == steps
    assert 0 < live[("flywheel_rollout_env_latency_seconds_sum", ())] / steps < 10  # a real browser step
    published = episodes_of(read_topic(settings, TOPICS.steps, int(steps + 2 * episodes), timeout=30))
    published_steps = sum(1 for events in published.values() for e in events if e.kind == "step")
    assert published_steps >= steps  # the scrape came before the last ones
