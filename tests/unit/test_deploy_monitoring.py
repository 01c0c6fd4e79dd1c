"""The rendered monitoring: a PodMonitor that reaches every long-running workload's /metrics and
a Grafana dashboard built from the one metric list (infra.runtime.metrics.METRICS)."""

from __future__ import annotations

import json

from app.deploy import DeployConfig, render
from app.monitoring import METRICS_PORT
from infra.runtime.metrics import METRICS, PROCESSES, process_metrics


def workloads():
    return render(DeployConfig())["workloads.yaml"]


def test_the_pod_monitor_reaches_every_long_running_workload():
    docs = workloads()
    (monitor,) = [d for d in docs if d["kind"] == "PodMonitor"]
    selector = monitor["spec"]["selector"]["matchLabels"]
    ports = {e["port"] for e in monitor["spec"]["podMetricsEndpoints"]}
    served = {}
    for d in docs:
        if d["kind"] not in ("Deployment", "Job"):
            continue
        template = d["spec"]["template"]
        (c,) = template["spec"]["containers"]
        named = {p.get("name") for p in c.get("ports", [])}
        if named & ports:
            assert selector.items() <= template["metadata"]["labels"].items(), d["metadata"]["name"]
            served[d["metadata"]["name"]] = named & ports
    assert set(served) == {"rollout", "streams", "sink", "policy-server", "trainer"}
    assert served["policy-server"] == {"http"}  # flywheel serve answers /metrics on its own port
    cm = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "flywheel-settings")
    assert cm["data"]["FLYWHEEL_METRICS_PORT"] == str(METRICS_PORT) and cm["data"]["FLYWHEEL_METRICS_HOST"] == "0.0.0.0"
    for d in docs:
        for c in d.get("spec", {}).get("template", {}).get("spec", {}).get("containers", []):
            for p in c.get("ports", []):
                if p["name"] == "metrics":
                    assert p["containerPort"] == METRICS_PORT


def test_the_dashboard_plots_every_declared_metric_once():
    (cm,) = [d for d in workloads() if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "flywheel-dashboard"]
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    board = json.loads(cm["data"]["flywheel.json"])
    rows = [p["title"] for p in board["panels"] if p["type"] == "row"]
    assert rows == list(PROCESSES)
    panels = [p for p in board["panels"] if p["type"] == "timeseries"]
    assert len({p["id"] for p in board["panels"]}) == len(board["panels"])
    plotted = []
    for p in panels:
        names = {m.name for m in METRICS if any(m.name in t["expr"] for t in p["targets"])}
        assert len(names) == 1, (p["title"], names)  # one metric per panel
        plotted += names
    assert sorted(plotted) == sorted(m.name for m in METRICS)
    for m in METRICS:
        exprs = [t["expr"] for p in panels for t in p["targets"] if m.name in t["expr"]]
        if m.kind == "histogram":
            assert all(f"{m.name}_bucket" in e and "histogram_quantile" in e for e in exprs)
        elif m.kind == "counter":
            assert all(e.startswith("sum") and f"rate({m.name}[" in e for e in exprs)


def test_every_declared_metric_is_registered_under_its_process():
    for process in PROCESSES:
        metrics = process_metrics(process)
        assert set(metrics) == {m.name for m in METRICS if m.process == process}
        for m in METRICS:
            assert m.name.startswith(f"flywheel_{m.process}_")
