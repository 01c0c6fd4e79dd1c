"""What `flywheel deploy render` adds for operators: the Prometheus scrape configuration (a
prometheus-operator ``PodMonitor``) and a Grafana dashboard, both built from the one metric list
``infra.runtime.metrics.METRICS``, so a metric declared there is scraped and plotted with no
other edit.

Every long-running workload serves ``/metrics``: rollout workers, Faust workers, sinks and the
trainer on the port named ``metrics`` (``FLYWHEEL_METRICS_PORT``), the policy server on its own
HTTP port (named ``http``). The dashboard is a ConfigMap labelled ``grafana_dashboard: "1"``,
the label Grafana's dashboard sidecar (kube-prometheus-stack) loads from.
"""

from __future__ import annotations

import json
from typing import Any

from infra.runtime.metrics import METRICS, PROCESSES, MetricSpec

METRICS_PORT = 9400
PART_OF = {"app.kubernetes.io/part-of": "flywheel"}


def pod_monitor(namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "monitoring.coreos.com/v1", "kind": "PodMonitor",
        "metadata": {"name": "flywheel", "namespace": namespace, "labels": dict(PART_OF)},
        "spec": {"selector": {"matchLabels": dict(PART_OF)},
                 "podMetricsEndpoints": [{"port": "metrics", "path": "/metrics", "interval": "15s"},
                                         {"port": "http", "path": "/metrics", "interval": "15s"}]},
    }


def query(spec: MetricSpec) -> list[tuple[str, str]]:
    """(PromQL, legend) for one metric: rates of counters, quantiles of histograms, gauges as they are."""
    by = f" by ({', '.join(spec.labels)})" if spec.labels else ""
    legend = " ".join("{{" + label + "}}" for label in spec.labels) or spec.name
    if spec.kind == "counter":
        return [(f"sum{by} (rate({spec.name}[1m]))", legend)]
    if spec.kind == "histogram":
        inner = ", ".join(("le", *spec.labels))
        return [(f"histogram_quantile({q}, sum by ({inner}) (rate({spec.name}_bucket[5m])))", f"p{int(q * 100)} {legend}")
                for q in (0.5, 0.95)]
    return [(f"max{by} ({spec.name})", legend)]


def _unit(spec: MetricSpec) -> str:
    if spec.name.endswith("_seconds"):
        return "s"
    if spec.kind == "counter":
        return "ops"
    return "percentunit" if spec.name.endswith("_fraction") else "short"


def dashboard() -> dict[str, Any]:
    """The Grafana dashboard model: one row per process, one time-series panel per metric."""
    panels: list[dict[str, Any]] = []
    y = 0
    for process in PROCESSES:
        panels.append({"type": "row", "title": process, "collapsed": False, "id": len(panels) + 1,
                       "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}})
        y += 1
        for i, spec in enumerate(m for m in METRICS if m.process == process):
            title = spec.help if spec.kind != "counter" else f"{spec.help} (per second)"
            panels.append({
                "type": "timeseries", "title": title, "id": len(panels) + 1,
                "datasource": {"type": "prometheus", "uid": "${datasource}"},
                "gridPos": {"h": 8, "w": 8, "x": (i % 3) * 8, "y": y + (i // 3) * 8},
                "fieldConfig": {"defaults": {"unit": _unit(spec)}, "overrides": []},
                "targets": [{"refId": chr(ord("A") + k), "expr": expr, "legendFormat": legend}
                            for k, (expr, legend) in enumerate(query(spec))],
            })
        y += 8 * ((sum(1 for m in METRICS if m.process == process) + 2) // 3)
    return {
        "title": "Flywheel", "uid": "flywheel", "schemaVersion": 39, "refresh": "30s",
        "time": {"from": "now-1h", "to": "now"}, "tags": ["flywheel"],
        "templating": {"list": [{"name": "datasource", "type": "datasource", "query": "prometheus",
                                 "label": "Prometheus"}]},
        "panels": panels,
    }


def dashboard_configmap(namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "flywheel-dashboard", "namespace": namespace,
                     "labels": {**PART_OF, "grafana_dashboard": "1"}},
        "data": {"flywheel.json": json.dumps(dashboard(), indent=1)},
    }
