"""The platform under a `flywheel demo` run: the local Kafka broker it starts when none is named
or running (and stops at the end unless kept), the run's topics, and the stopping of its
processes."""

from __future__ import annotations

import psutil

from app.commands import local_cluster, running_cluster
from infra.kafka.jars import fetch_jars
from infra.runtime.admin import ensure_topics
from infra.runtime.errors import UserError
from infra.runtime.procs import Child
from infra.runtime.settings import Settings

def broker_to_start(settings: Settings):
    """The local broker this run must start (not started yet), or None when one is named or
    already running: known before it starts, so an exit while it is starting still stops it."""
    if settings.kafka_bootstrap:
        return None
    return local_cluster(settings, 1) if running_cluster(settings) is None else None


def ensure_platform(settings: Settings, broker) -> None:
    """Start ``broker`` (``broker_to_start``'s) if there is one, then create the run's topics."""
    if broker is not None:
        fetch_jars(broker.libs)
        took = broker.start()
        print(f"Kafka up in {took:.1f}s at {broker.bootstrap}", flush=True)
    report = ensure_topics(settings)
    if report.drift:
        raise UserError("topic drift: " + "; ".join(report.lines()))


def leave_platform(settings: Settings, started, keep: bool) -> str:
    """Stop the broker this run started unless asked to keep it; -> one line saying what is left."""
    if started is None:
        where = settings.kafka_bootstrap or f"127.0.0.1:{settings.kafka_port}"
        return f"Kafka at {where} was running before this demo and is left running"
    if keep:
        return f"Kafka at {started.bootstrap} is left running (--keep-broker); stop it with `flywheel down`"
    if not started.stop():
        return f"the Kafka broker this demo was to start ({started.bootstrap}) is not running"
    return f"stopped the Kafka broker this demo started ({started.bootstrap}); its data stays under {settings.data_path}"


def stop_children(children: list[Child]) -> str:
    """Stop every child still running, the last started first (the sink gets longer to flush its
    last batch); -> one line naming the ones this call stopped (empty when none was running)."""
    stopped = []
    for child in reversed(children):
        if child.alive:
            child.stop(grace=60 if child.name == "sink" else 30)
            stopped.append(child.name)
    return f"stopped {', '.join(stopped)}" if stopped else ""


LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1", "0.0.0.0")


def broker_processes(settings: Settings) -> dict[str, int]:
    """The processes of this machine that serve the run's Kafka (those listening on a local
    bootstrap port) by name, ``kafka`` (``kafka-<port>`` for several), so the report's CPU table
    counts the broker too; none where the bootstrap names other hosts."""
    ports = {int(port) for host, _, port in (a.strip().rpartition(":") for a in settings.bootstrap.split(","))
             if host.strip("[]") in LOCAL_HOSTS and port.isdigit()}
    try:
        listening = {c.laddr.port: c.pid for c in psutil.net_connections(kind="tcp")
                     if c.status == psutil.CONN_LISTEN and c.pid is not None and c.laddr.port in ports}
    except psutil.Error:  # not allowed to see other processes' sockets: the table goes without it
        return {}
    pids = sorted(set(listening.values()))
    return {"kafka": pids[0]} if len(pids) == 1 else {f"kafka-{port}": pid for port, pid in sorted(listening.items())}
