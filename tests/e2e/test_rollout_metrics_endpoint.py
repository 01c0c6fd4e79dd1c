"""`flywheel rollout` in a real browser serves /metrics: scraped over HTTP and parsed with
prometheus-client's parser while it runs, its counts match what it published."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from infra.runtime.topics import TOPICS
from producers.tasks import build_tasks, submit
from tests.e2e.browser_support import require_chromium
from tests.e2e.test_rollout_worker import episodes_of, read_topic
from tests.integration.test_metrics_endpoints import free_port, scrape

pytestmark = pytest.mark.e2e


def test_the_rollout_worker_serves_steps_latencies_and_outcomes(settings, group_id):
    require_chromium()
    submit(settings, build_tasks("miniwob", ["click-test"], 40, prefix="metrics", max_steps=3))
    port = free_port()
    env = {**os.environ, "FLYWHEEL_KAFKA_BOOTSTRAP": settings.bootstrap, "FLYWHEEL_TOPIC_PREFIX": settings.topic_prefix,
           "FLYWHEEL_DATA_DIR": settings.data_dir, "FLYWHEEL_METRICS_PORT": str(port)}
    proc = subprocess.Popen([sys.executable, "-m", "infra.app.cli", "rollout", "--sandboxes", "1", "--policy-backend",
                             "random", "--policy-name", "random", "--group-id", group_id, "--worker-id", "w-metrics",
                             "--status-interval-s", "0.5", "--no-reload"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    status_file = Path(settings.data_dir) / "rollout" / "w-metrics.json"
    try:
        end, live = time.time() + 90, {}
        while time.time() < end:
            if status_file.exists() and orjson.loads(status_file.read_bytes())["episodes"] >= 3:
                live = scrape(port)  # while it runs
                break
            time.sleep(0.3)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out.decode()[-3000:]
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
