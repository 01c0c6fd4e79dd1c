"""What SASL_SSL (SCRAM-SHA-512 over TLS) costs against PLAINTEXT, measured side by side in one run.

Run: python -m benchmarks.bench_kafka_sasl [--n 20000] [--size 1024] [--rounds 3]
Starts two single-node brokers on free ports in a temporary folder, one PLAINTEXT and one
SASL_SSL (infra.kafka.tls makes its CA, certificate and SCRAM users), then for each, alternately:
the time to a first metadata answer of a new client (TLS handshake + SCRAM login), and the
rates of the project's idempotent producer (acks=all, lz4) and of a consumer reading the same
messages back. Prints the best round of each and the ratios SASL_SSL / PLAINTEXT.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from confluent_kafka.admin import AdminClient, NewTopic

from infra.kafka.broker import LocalCluster, free_port_block
from infra.runtime.kafka_clients import DeliveryTracker, client_config, flush_or_raise, make_consumer, make_producer
from infra.kafka.jars import fetch_jars
from infra.runtime.settings import load_settings
from infra.kafka.tls import make_security


def settings_for(cluster: LocalCluster):
    extra = cluster.security.client_settings() if cluster.security else {}
    return load_settings({"kafka_bootstrap": cluster.bootstrap, **extra}, env={})


def first_answer_s(settings) -> float:
    t0 = time.perf_counter()
    AdminClient(client_config(settings)).list_topics(timeout=30)
    return time.perf_counter() - t0


def produce_consume(settings, n: int, size: int) -> tuple[float, float]:
    """(produced/s, consumed/s) for n messages of ``size`` bytes on a fresh one-partition topic."""
    topic = f"bench-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(client_config(settings))  # kept alive until the creation is answered
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    payload = os.urandom(size // 2).hex().encode()  # hex: lz4 compresses it about as well as JSON
    producer, tracker = make_producer(settings), DeliveryTracker()
    t0 = time.perf_counter()
    for i in range(n):
        while True:
            try:
                producer.produce(topic, key=str(i).encode(), value=payload, on_delivery=tracker)
                break
            except BufferError:
                producer.poll(0.05)
    flush_or_raise(producer, tracker, timeout=120)
    produced = n / (time.perf_counter() - t0)
    consumer = make_consumer(settings, f"bench-{uuid.uuid4().hex[:8]}")
    consumer.subscribe([topic])
    got, t0 = 0, time.perf_counter()
    while got < n:
        got += sum(1 for m in consumer.consume(1000, timeout=1.0) if not m.error())
    consumed = n / (time.perf_counter() - t0)
    consumer.close()
    return produced, consumed


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    libs = load_settings({"data_dir": str(ROOT / "var")}).data_path / "kafka" / "libs"
    fetch_jars(libs)
    home = Path(tempfile.mkdtemp(prefix="flywheel-bench-sasl-"))
    clusters = {}
    try:
        for name, security in (("PLAINTEXT", None), ("SASL_SSL", make_security(home / "security"))):
            port = free_port_block(2)
            clusters[name] = LocalCluster(home / name, libs, 1, port, port + 1, security)
            print(f"# {name} broker up in {clusters[name].start():.1f}s at {clusters[name].bootstrap}", flush=True)
        best: dict[str, list[float]] = {name: [float("inf"), 0.0, 0.0] for name in clusters}
        for _ in range(args.rounds):
            for name, cluster in clusters.items():  # alternate, so load drift hits both alike
                s = settings_for(cluster)
                answer = first_answer_s(s)
                produced, consumed = produce_consume(s, args.n, args.size)
                b = best[name]
                best[name] = [min(b[0], answer), max(b[1], produced), max(b[2], consumed)]
        print(f"{'':10s} {'first answer ms':>16s} {'produce msg/s':>14s} {'consume msg/s':>14s}"
              f"   ({args.n} x {args.size} B, best of {args.rounds})")
        for name, (answer, produced, consumed) in best.items():
            print(f"{name:10s} {answer * 1000:16.0f} {produced:14.0f} {consumed:14.0f}")
        p, s = best["PLAINTEXT"], best["SASL_SSL"]
        print(f"{'ratio':10s} {s[0] / p[0]:16.2f} {s[1] / p[1]:14.2f} {s[2] / p[2]:14.2f}   (SASL_SSL / PLAINTEXT)")
    finally:
        for cluster in clusters.values():
            cluster.stop()
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
