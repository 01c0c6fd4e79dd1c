"""Helpers for the tests that run the Faust worker (`flywheel streams` as a subprocess) on the real
broker: start and stop it, produce steps to it, and collect what it writes. The tests that use them
also ask for the ``delete_faust_internal_topics`` fixture (tests/integration/conftest.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from infra.runtime.kafka_clients import DeliveryTracker, flush_or_raise, make_consumer, make_producer
from infra.runtime.topics import TOPICS, topic_name
from schemas.codec import decode, encode

ROOT = Path(__file__).resolve().parents[2]
STARTUP_S = 60.0


def start_worker(settings, log_path: Path, **config) -> subprocess.Popen:
    env = dict(os.environ, FLYWHEEL_KAFKA_BOOTSTRAP=settings.bootstrap, FLYWHEEL_TOPIC_PREFIX=settings.topic_prefix,
               FLYWHEEL_DATA_DIR=settings.data_dir, FLYWHEEL_COMMIT_INTERVAL_S="0.5", FLYWHEEL_SESSION_TIMEOUT_S="8",
               FLYWHEEL_STANDBY_REPLICAS="0")
    env.update({f"FLYWHEEL_{k.upper()}": str(v) for k, v in config.items()})
    log = open(log_path, "ab")
    return subprocess.Popen([sys.executable, "-m", "app.cli", "streams"], cwd=ROOT, env=env,
                            stdout=log, stderr=subprocess.STDOUT)


def stop(proc: subprocess.Popen, sig=signal.SIGTERM) -> None:
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def produce(settings, records) -> None:
    """records: events, or (key, raw bytes) pairs for malformed input."""
    producer, tracker = make_producer(settings), DeliveryTracker()
    name = topic_name(TOPICS.steps, settings)
    for rec in records:
        key, value = rec if isinstance(rec, tuple) else (rec.episode_id.encode(), encode(rec))
        producer.produce(name, key=key, value=value, on_delivery=tracker)
        producer.poll(0)
    flush_or_raise(producer, tracker)


class Collector:
    """Reads topics from the start in a background thread (its own fresh group)."""

    def __init__(self, settings, group_id: str, specs) -> None:
        self.by_topic: dict[str, list] = {topic_name(s, settings): [] for s in specs}
        self._consumer = make_consumer(settings, group_id)
        self._consumer.subscribe(list(self.by_topic))
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            msg = self._consumer.poll(0.2)
            if msg is None or msg.error():
                continue
            with self._lock:
                self.by_topic[msg.topic()].append(msg)
        self._consumer.close()

    def values(self, settings, spec, tp):
        with self._lock:
            msgs = list(self.by_topic[topic_name(spec, settings)])
        return [decode(m.value(), tp) for m in msgs]

    def wait(self, predicate, timeout: float, worker: subprocess.Popen | None = None, what: str = "",
             detail=lambda: "") -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if predicate():
                return
            if worker is not None and worker.poll() is not None:
                pytest.fail(f"streams worker exited with {worker.returncode} while waiting for {what}")
            time.sleep(0.2)
        pytest.fail(f"timed out after {timeout:.0f}s waiting for {what} {detail()}")

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
