"""SASL/SCRAM over TLS for real: a local broker started with SASL_SSL, and every client kind on it.

The project makes the CA, the broker certificate and the SCRAM users (infra.kafka.tls); the test runs
the idempotent producer, a consumer, the admin (catalog topics), and the Faust app (a streams
worker assembling episodes into trajectories) over it, then shows that a wrong password ends in
one clear line from the CLI.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from infra.runtime.admin import ensure_topics
from infra.kafka.broker import LocalCluster, free_port_block
from infra.runtime.kafka_clients import DeliveryTracker, flush_or_raise, make_consumer, make_producer
from infra.runtime.settings import load_settings
from infra.kafka.tls import make_security
from infra.runtime.topics import TOPICS, topic_name
from schemas.codec import decode, encode
from schemas.events import Trajectory
from tests.fakes.steps import episode_events

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def sasl_cluster(kafka_libs, tmp_path_factory):
    """One SASL_SSL broker for the module: each test has its own topic prefix and data dir."""
    home = tmp_path_factory.mktemp("sasl") / "kafka"
    port = free_port_block(2)
    cluster = LocalCluster(home, kafka_libs, 1, port, port + 1, security=make_security(home / "security"))
    cluster.start()
    yield cluster
    cluster.stop()


def settings_for(cluster, tmp_path, **override):
    return load_settings({"data_dir": str(tmp_path / "data"), "kafka_bootstrap": cluster.bootstrap,
                          "topic_prefix": f"s{uuid.uuid4().hex[:6]}.", **cluster.security.client_settings(),
                          **override}, env={})


def env_for(settings) -> dict[str, str]:
    from infra.runtime.config import to_env

    return {**os.environ, **to_env(settings)}


def test_producer_consumer_admin_and_faust_over_sasl_ssl(sasl_cluster, tmp_path):
    settings = settings_for(sasl_cluster, tmp_path)
    assert not ensure_topics(settings).drift  # admin over SASL_SSL
    events = [ev for i in range(5) for ev in episode_events(f"sasl-{i}", 3, success=True)]
    producer, tracker = make_producer(settings), DeliveryTracker()
    steps = topic_name(TOPICS.steps, settings)
    for ev in events:
        producer.produce(steps, key=ev.episode_id.encode(), value=encode(ev), on_delivery=tracker)
    flush_or_raise(producer, tracker)  # idempotent producer, acks=all, over TLS + SCRAM
    assert tracker.acked == len(events)

    worker = subprocess.Popen([sys.executable, "-m", "app.cli", "streams"], cwd=ROOT, env=env_for(settings),
                              stdout=open(tmp_path / "streams.log", "wb"), stderr=subprocess.STDOUT)
    consumer = make_consumer(settings, f"g{uuid.uuid4().hex[:8]}")
    consumer.subscribe([topic_name(TOPICS.trajectories, settings)])
    got: dict[str, Trajectory] = {}
    try:
        deadline = time.monotonic() + 120
        while len(got) < 5 and time.monotonic() < deadline and worker.poll() is None:
            for msg in consumer.consume(10, timeout=1.0):
                if not msg.error():
                    traj = decode(msg.value(), Trajectory)
                    got[traj.episode_id] = traj
    finally:
        consumer.close()
        worker.terminate()
        worker.wait(60)
    assert sorted(got) == [f"sasl-{i}" for i in range(5)], (tmp_path / "streams.log").read_text()[-2000:]
    assert all(len(t.steps) == 3 for t in got.values())


@pytest.mark.parametrize("command", [
    ["topics"],  # admin
    ["tasks", "submit", "--suite", "miniwob", "--tasks", "click-test", "--episodes", "1"],  # producer
    ["sink"],  # consumer
    ["streams"],  # the Faust app
], ids=lambda c: c[0])
def test_a_wrong_password_is_one_clear_line(sasl_cluster, tmp_path, command):
    settings = settings_for(sasl_cluster, tmp_path, kafka_sasl_password="not-the-password")
    # without the check a refused login is retried (and logged) by librdkafka for ever
    out = subprocess.run([sys.executable, "-m", "app.cli", *command], cwd=ROOT, env=env_for(settings),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr
    lines = [ln for ln in out.stderr.strip().splitlines() if ln and "INFO" not in ln]
    assert len(lines) == 1 and "refused the credentials of user 'flywheel'" in lines[0], out.stderr
    assert "Traceback" not in out.stderr and "not-the-password" not in out.stderr  # the secret is never echoed


def test_flywheel_up_sasl_writes_the_client_settings_and_flywheel_commands_use_them(kafka_libs, tmp_path):
    import shutil

    from infra.runtime.settings import read_client_env

    data = tmp_path / "fw"
    (data / "kafka").mkdir(parents=True)
    shutil.copytree(kafka_libs, data / "kafka" / "libs")  # the cached jars, no second download
    port = free_port_block(2)
    env = {**os.environ, "FLYWHEEL_DATA_DIR": str(data), "FLYWHEEL_KAFKA_PORT": str(port),
           "FLYWHEEL_KAFKA_CONTROLLER_PORT": str(port + 1)}
    env.pop("FLYWHEEL_KAFKA_BOOTSTRAP", None)
    sasl_env = data / "kafka" / "sasl.env"
    up = subprocess.run([sys.executable, "-m", "app.cli", "up", "--sasl"], cwd=ROOT, env=env,
                        capture_output=True, text=True, timeout=180)
    try:
        assert up.returncode == 0, up.stderr[-2000:]
        assert "SASL_SSL" in up.stdout and sasl_env.exists() and (sasl_env.stat().st_mode & 0o777) == 0o600
        client = read_client_env(sasl_env)
        assert client["FLYWHEEL_KAFKA_SASL_MECHANISM"] == "SCRAM-SHA-512"
        assert client["FLYWHEEL_KAFKA_SASL_PASSWORD"] not in up.stdout + up.stderr
        # no security settings given: the command reads them from the data dir by itself
        topics = subprocess.run([sys.executable, "-m", "app.cli", "topics"], cwd=ROOT, env=env,
                                capture_output=True, text=True, timeout=180)
        assert topics.returncode == 0, topics.stderr[-2000:]
        # a client elsewhere sources the file (the documented way) and names the bootstrap
        topics = subprocess.run([sys.executable, "-m", "app.cli", "topics"], cwd=ROOT,
                                env={**env, **client, "FLYWHEEL_DATA_DIR": str(tmp_path / "elsewhere"),
                                     "FLYWHEEL_KAFKA_BOOTSTRAP": f"127.0.0.1:{port}"},
                                capture_output=True, text=True, timeout=180)
        assert topics.returncode == 0, topics.stderr[-2000:]
    finally:
        down = subprocess.run([sys.executable, "-m", "app.cli", "down"], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=120)
    assert "Kafka stopped" in down.stdout, down.stdout + down.stderr
    assert not sasl_env.exists()  # a later PLAINTEXT broker is not mistaken for this one
