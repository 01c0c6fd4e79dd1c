"""Prometheus /metrics of the long-running processes, scraped over HTTP and parsed with
prometheus-client's own parser, on the real broker and chDB: the figures move with the work done."""

from __future__ import annotations

import dataclasses
import threading
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.fakes.run import publish, synthetic_run
from consumers.sink import Sink, SinkConfig
from infra.runtime.metrics import serve_metrics
from infra.runtime.topics import TOPICS
from schemas.events import ScoredTrajectory
from tests.fakes.steps import episode_events
from infra.runtime.procs import free_port
from tests.integration.streams_support import STARTUP_S, Collector, produce, start_worker, stop

pytestmark = pytest.mark.usefixtures("delete_faust_internal_topics")


def scrape(port: int) -> dict[tuple[str, tuple], float]:
    """(sample name, sorted labels) -> value, from http://127.0.0.1:port/metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        assert resp.status == 200 and resp.headers["Content-Type"].startswith("text/plain")
        text = resp.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def scrape_when(port: int, predicate, timeout: float) -> dict:
    deadline, last = time.time() + timeout, {}
    while time.time() < deadline:
        try:
            last = scrape(port)
        except OSError:  # not listening yet
            last = {}
        if last and predicate(last):
            return last
        time.sleep(0.5)
    raise AssertionError(f"metrics never satisfied the check; last scrape: {sorted(last.items())[:40]}")


def test_the_streams_worker_serves_its_counts(settings, group_id, tmp_path):
    port = free_port()
    worker = start_worker(settings, tmp_path / "worker.log", metrics_port=port)
    collector = Collector(settings, group_id, [TOPICS.rl, TOPICS.sft, TOPICS.ct])
    try:
        events = [ev for i in range(3) for ev in episode_events(f"m-{i}", 2, success=True)]
        produce(settings, events + [(b"bad", b"{not json")])
        collector.wait(lambda: len(collector.values(settings, TOPICS.rl, ScoredTrajectory)) >= 3, STARTUP_S + 60,
                       worker, "3 RL records")
        samples = scrape_when(port, lambda m: m.get(("flywheel_streams_events_total", ()), 0) >= len(events) + 1, 30)
        assert samples[("flywheel_streams_events_total", ())] == len(events) + 1
        assert samples[("flywheel_streams_records_total", (("topic", TOPICS.rl.name),))] == 3
        assert samples[("flywheel_streams_records_total", (("topic", TOPICS.trajectories.name),))] == 3
        assert samples[("flywheel_streams_dead_letters_total", (("stage", "assembler"),))] == 1
        assert samples[("flywheel_streams_batch_seconds_count", ())] >= 1
    finally:
        collector.close()
        stop(worker)


def test_the_sink_serves_its_counts_and_lag(settings, group_id):
    run = synthetic_run(4, versions=1)
    sent = publish(settings, run)
    port = free_port()
    cfg = SinkConfig(group_id=group_id, exit_when_idle_s=1.5, flush_interval_s=0.5, query_port=-1)
    sink = Sink(dataclasses.replace(settings, metrics_port=port), cfg)
    assert serve_metrics(sink.settings, sink.metrics) == port
    done = threading.Event()
    threading.Thread(target=lambda: (sink.run(threading.Event()), done.set()), daemon=True).start()
    assert done.wait(120), "the sink did not go idle"
    samples = scrape(port)
    consumed = sum(v for (name, _), v in samples.items() if name == "flywheel_sink_records_total")
    assert consumed == sent
    assert samples[("flywheel_sink_records_total", (("topic", TOPICS.steps.name),))] == len(run.episode_events)
    assert samples[("flywheel_sink_records_total", (("topic", TOPICS.scored.name),))] == len(run.scored)
    lags = {labels: v for (name, labels), v in samples.items() if name == "flywheel_sink_consumer_lag"}
    assert lags and all(v == 0 for v in lags.values())  # it went idle with nothing left
    assert samples[("flywheel_sink_flush_seconds_count", ())] >= 1


def test_the_trainer_serves_its_updates(settings, group_id):
    from trainer.rl.config import TrainConfig
    from trainer.rl.streaming_ppo import train
    from tests.integration.test_trainer_stream import POLICY, POLICY_CONFIG, produce_trajectories

    port = free_port()
    settings = dataclasses.replace(settings, max_staleness=100, metrics_port=port)
    produce_trajectories(settings, 8)
    cfg = TrainConfig(policy_name=POLICY, policy_config=POLICY_CONFIG, min_batch=4, max_wait_s=60.0,
                      max_updates=2, group_id=group_id, epochs=1, minibatch_size=4)
    worker = threading.Thread(target=lambda: train(cfg, settings), daemon=True)
    worker.start()
    worker.join(timeout=180)
    assert not worker.is_alive(), "trainer did not finish 2 updates in 180 s"
    samples = scrape(port)  # the endpoint outlives the loop: a daemon thread of this process
    assert samples[("flywheel_trainer_updates_total", ())] == 2
    assert samples[("flywheel_trainer_trajectories_total", (("fate", "trained"),))] == 8
    assert samples[("flywheel_trainer_update_seconds_count", ())] == 2
    assert samples[("flywheel_trainer_staleness_count", ())] == 8
    assert samples[("flywheel_trainer_policy_version", ())] == 2
    assert 0.0 <= samples[("flywheel_trainer_idle_fraction", ())] <= 1.0
