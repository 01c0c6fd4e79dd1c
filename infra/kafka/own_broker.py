"""A Kafka broker for a benchmark or an ablation run: the configured one when it answers, else one started here.

    with broker_for_benchmarks() as bootstrap:   # sets FLYWHEEL_KAFKA_BOOTSTRAP for children
        ...

Order: FLYWHEEL_KAFKA_BOOTSTRAP (it must answer), else the local broker of `flywheel up` when it
answers, else a fresh single-node KRaft broker in a temporary folder on free ports, stopped (and
its folder removed) on exit, so `python -m benchmarks.run_all` needs no set-up step.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
from pathlib import Path
from typing import Iterator

from infra.kafka.broker import LocalCluster, free_port_block
from infra.runtime.errors import UserError
from infra.runtime.kafka_clients import client_config
from infra.kafka.jars import fetch_jars
from infra.runtime.probe import probe_brokers
from infra.runtime.settings import load_settings

ROOT = Path(__file__).resolve().parents[2]  # the checkout: var/ holds the data by default


@contextlib.contextmanager
def broker_for_benchmarks() -> Iterator[str]:
    args = {} if os.environ.get("FLYWHEEL_DATA_DIR") else {"data_dir": str(ROOT / "var")}
    settings = load_settings(args)
    if os.environ.get("FLYWHEEL_KAFKA_BOOTSTRAP"):
        if probe_brokers(client_config(settings), timeout=10.0) is None:
            raise UserError(f"FLYWHEEL_KAFKA_BOOTSTRAP={settings.bootstrap} does not answer")
        yield settings.bootstrap
        return
    if probe_brokers(client_config(settings), timeout=2.0):
        os.environ["FLYWHEEL_KAFKA_BOOTSTRAP"] = settings.bootstrap
        yield settings.bootstrap
        return
    libs = settings.data_path / "kafka" / "libs"
    fetch_jars(libs)
    home = Path(tempfile.mkdtemp(prefix="flywheel-bench-kafka-"))
    port = free_port_block(2)
    cluster = LocalCluster(home, libs, 1, port, port + 1)
    try:
        took = cluster.start()
        print(f"# started a Kafka broker for this run at {cluster.bootstrap} in {took:.1f}s", flush=True)
        os.environ["FLYWHEEL_KAFKA_BOOTSTRAP"] = cluster.bootstrap
        yield cluster.bootstrap
    finally:  # a Ctrl-C or SIGTERM waits until the broker is stopped and its folder removed
        held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        try:
            cluster.stop()
            os.environ.pop("FLYWHEEL_KAFKA_BOOTSTRAP", None)
            shutil.rmtree(home, ignore_errors=True)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)
