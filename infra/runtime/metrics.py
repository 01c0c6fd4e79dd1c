"""Prometheus metrics of every long-running process, declared once (prometheus-client).

    metrics = process_metrics("streams")           # this process's metrics, in its own registry
    metrics["flywheel_streams_events_total"].inc(n)
    serve_metrics(settings, metrics)               # /metrics on settings.metrics_port (0: off)

``METRICS`` is the one list: each metric's name (``flywheel_<group>_<name>``, the group being
the process, as the trainer's ``group/name`` metric names), kind, help, labels and the process
that exposes it. ``flywheel deploy render`` builds the scrape configuration and the Grafana
dashboard from the same list, so a metric added here is scraped and plotted without another edit.

Each process gets its own ``CollectorRegistry`` (not prometheus-client's global one), so tests
and several stages in one process never share counters.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics, start_http_server

from infra.runtime.settings import Settings

log = logging.getLogger("flywheel.metrics")

PROCESSES = ("rollout", "streams", "sink", "trainer", "serve")
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
UPDATE_BUCKETS = (0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


@dataclass(frozen=True)
class MetricSpec:
    name: str  # flywheel_<process>_<what>[_total | _seconds]
    kind: str  # counter | gauge | histogram
    help: str
    process: str
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] = LATENCY_BUCKETS  # histograms only


METRICS: tuple[MetricSpec, ...] = (
    # rollout workers
    MetricSpec("flywheel_rollout_steps_total", "counter", "environment steps taken", "rollout", ("task",)),
    MetricSpec("flywheel_rollout_episodes_total", "counter", "episodes finished, by outcome", "rollout",
               ("task", "outcome")),
    MetricSpec("flywheel_rollout_policy_latency_seconds", "histogram", "time the policy took to act on one step",
               "rollout"),
    MetricSpec("flywheel_rollout_env_latency_seconds", "histogram", "time the sandbox took to carry out one step",
               "rollout"),
    MetricSpec("flywheel_rollout_policy_version", "gauge", "policy version the worker acts with", "rollout",
               ("policy",)),
    # stream processors
    MetricSpec("flywheel_streams_events_total", "counter", "step events consumed", "streams"),
    MetricSpec("flywheel_streams_records_total", "counter", "records published, by topic", "streams", ("topic",)),
    MetricSpec("flywheel_streams_dead_letters_total", "counter", "records sent to the dead-letter topic, by stage",
               "streams", ("stage",)),
    MetricSpec("flywheel_streams_batch_seconds", "histogram", "time to process and acknowledge one batch", "streams"),
    # ClickHouse sink
    MetricSpec("flywheel_sink_records_total", "counter", "records consumed, by topic", "sink", ("topic",)),
    MetricSpec("flywheel_sink_dead_letters_total", "counter", "records sent to the dead-letter topic", "sink"),
    MetricSpec("flywheel_sink_consumer_lag", "gauge", "records behind the end of each topic", "sink", ("topic",)),
    MetricSpec("flywheel_sink_flush_seconds", "histogram", "time of one batched insert and commit", "sink"),
    # trainer
    MetricSpec("flywheel_trainer_updates_total", "counter", "PPO updates published", "trainer"),
    MetricSpec("flywheel_trainer_trajectories_total", "counter", "trajectories read, by what became of them",
               "trainer", ("fate",)),
    MetricSpec("flywheel_trainer_update_seconds", "histogram", "time of one update", "trainer",
               buckets=UPDATE_BUCKETS),
    MetricSpec("flywheel_trainer_idle_fraction", "gauge", "share of wall time spent waiting for data", "trainer"),
    MetricSpec("flywheel_trainer_staleness", "histogram", "policy versions a trained trajectory lagged the newest",
               "trainer", buckets=(0, 1, 2, 3, 4, 6, 8, 16)),
    MetricSpec("flywheel_trainer_policy_version", "gauge", "newest version the trainer published", "trainer"),
    # policy server
    MetricSpec("flywheel_serve_requests_total", "counter", "act requests, by result", "serve", ("result",)),
    MetricSpec("flywheel_serve_latency_seconds", "histogram", "time to answer one act request", "serve"),
    MetricSpec("flywheel_serve_policy_version", "gauge", "policy version being served", "serve", ("policy",)),
)
_KINDS = {"counter": Counter, "gauge": Gauge, "histogram": Histogram}
disable_created_metrics()  # no *_created series: a counter's start time is noise on a dashboard


def specs_for(process: str) -> tuple[MetricSpec, ...]:
    if process not in PROCESSES:
        raise ValueError(f"unknown process {process!r}; one of {PROCESSES}")
    return tuple(m for m in METRICS if m.process == process)


class ProcessMetrics(dict):
    """name -> prometheus-client metric, all in ``self.registry``."""

    def __init__(self, process: str) -> None:
        super().__init__()
        self.process, self.registry = process, CollectorRegistry()
        for spec in specs_for(process):
            # prometheus-client adds _total to a counter's samples itself: declare the base name
            name = spec.name.removesuffix("_total") if spec.kind == "counter" else spec.name
            extra = {"buckets": spec.buckets} if spec.kind == "histogram" else {}
            self[spec.name] = _KINDS[spec.kind](name, spec.help, spec.labels, registry=self.registry, **extra)


def process_metrics(process: str) -> ProcessMetrics:
    return ProcessMetrics(process)


def serve_metrics(settings: Settings, metrics: ProcessMetrics) -> int | None:
    """Serve ``/metrics`` on ``settings.metrics_port`` (0: off); -> the port, or None when off.
    The server is a daemon thread: it ends with the process."""
    if not settings.metrics_port:
        return None
    server, _ = start_http_server(settings.metrics_port, addr=settings.metrics_host, registry=metrics.registry)
    port = server.server_address[1]
    log.info("%s metrics on http://%s:%d/metrics", metrics.process, settings.metrics_host, port)
    return port
