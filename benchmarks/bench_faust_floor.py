"""The floor of one Faust worker: how fast an agent can take events that it does nothing with.

    python -m benchmarks.bench_faust_floor [--events 300000]

The stream processors' throughput target (one worker at 15k events/s, half a bare loop's rate)
is bounded by what Faust itself costs per event before any of Flywheel's work. This measures it:
the same step events as bench_streams.py (about 0.8 KiB each) on a fresh topic with the steps
topic's partition count, then, in one run:

1. Faust: one worker (subprocess) with one agent that takes events in batches exactly as the
   stream stages do (``stream.take_events(512, within=0.02)``, acks and commits on) and only
   counts them: no decode, no send;
2. bare: a confluent-kafka consumer in this process that polls in batches of 500 and only counts,
   committing every second like the worker.

Both rates are events / (time of the last counted event - time of the first). Prints both and
Faust/bare, and Faust's events per CPU second (the worker's user + system time).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from infra.kafka.own_broker import broker_for_benchmarks

ROOT = Path(__file__).resolve().parents[1]


def worker(topic: str, n: int, out: str) -> None:
    """The Faust side (run in a subprocess): count ``n`` events, write 'first last cpu' to ``out``."""
    from streams.cli import use_event_loop
    from streams.config import StreamsConfig

    cfg = StreamsConfig()
    use_event_loop(cfg.event_loop)  # the worker's loop, before Faust makes it
    import faust

    from infra.runtime.settings import load_settings
    from streams.app import faust_settings

    settings = load_settings({})
    app = faust.App(f"floor-{uuid.uuid4().hex[:8]}", datadir=tempfile.mkdtemp(), **faust_settings(settings, cfg))
    source = app.topic(topic, key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw")
    seen = {"n": 0, "first": 0.0}

    @app.agent(source)
    async def count(stream):
        async for batch in stream.take_events(cfg.batch_max, within=cfg.batch_within_s):
            seen["first"] = seen["first"] or time.time()
            seen["n"] += len(batch)
            if seen["n"] >= n:
                cpu = sum(os.times()[:2])
                Path(out).write_text(f"{seen['first']} {time.time()} {cpu}")
                os._exit(0)

    w = faust.Worker(app, loglevel="warning", quiet=True)
    w.spinner = None
    w.execute_from_commandline()


def bare(settings, topic: str, n: int) -> float:
    from infra.runtime.kafka_clients import make_consumer

    consumer = make_consumer(settings, f"floor-bare-{uuid.uuid4().hex[:8]}")
    consumer.subscribe([topic])
    seen, first, committed = 0, 0.0, time.monotonic()
    try:
        while seen < n:
            msgs = consumer.consume(500, 0.2)
            first = first or (time.time() if msgs else 0.0)
            seen += sum(1 for m in msgs if not m.error())
            if time.monotonic() - committed >= 1.0:
                consumer.commit(asynchronous=False)
                committed = time.monotonic()
        consumer.commit(asynchronous=False)
        return n / (time.time() - first)
    finally:
        consumer.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=300_000)
    ap.add_argument("--worker", nargs=3, metavar=("TOPIC", "N", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.worker[0], int(args.worker[1]), args.worker[2])
        return

    from confluent_kafka.admin import AdminClient, NewTopic

    from infra.runtime.kafka_clients import DeliveryTracker, client_config, flush_or_raise, make_producer
    from infra.runtime.settings import load_settings
    from infra.runtime.topics import STEP_PARTITIONS
    from schemas.codec import encode
    from benchmarks.fakes import episode_events  # test fakes: benchmarks/fakes.py

    settings = load_settings({})
    topic = f"floor-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(client_config(settings))
    admin.create_topics([NewTopic(topic, STEP_PARTITIONS, settings.replication_factor)])[topic].result(30)
    try:
        values = [(ev.episode_id.encode(), encode(ev)) for i in range(args.events // 12 + 1)
                  for ev in episode_events(f"floor-{i}", 10)][:args.events]
        producer, tracker = make_producer(settings), DeliveryTracker()
        for key, value in values:
            while True:
                try:
                    producer.produce(topic, key=key, value=value, on_delivery=tracker)
                    break
                except BufferError:
                    producer.poll(0.5)
            producer.poll(0)
        flush_or_raise(producer, tracker)
        size = sum(len(v) for _, v in values) / len(values)
        print(f"{len(values)} events of {size:.0f} bytes on {STEP_PARTITIONS} partitions")

        out = Path(tempfile.mkdtemp()) / "floor.txt"
        env = dict(os.environ, FLYWHEEL_LOGLEVEL="warning")
        t0 = time.time()
        proc = subprocess.run([sys.executable, __file__, "--worker", topic, str(len(values)), str(out)],
                              cwd=ROOT, env=env, timeout=1800, capture_output=True)
        if not out.exists():
            raise SystemExit(f"the Faust worker exited with {proc.returncode}: {proc.stderr.decode()[-2000:]}")
        first, last, cpu = (float(x) for x in out.read_text().split())
        faust_rate = len(values) / (last - first)
        print(f"faust agent that only counts (take_events {512}, acks on): {faust_rate:,.0f} events/s "
              f"({len(values) / cpu:,.0f} per CPU second of the worker, start-up included; run {time.time() - t0:.0f}s)")
        bare_rate = bare(settings, topic, len(values))
        print(f"bare confluent-kafka consumer that only counts: {bare_rate:,.0f} events/s")
        print(f"ratio faust / bare: {faust_rate / bare_rate:.2f}")
    finally:
        admin.delete_topics([topic])


if __name__ == "__main__":
    with broker_for_benchmarks():
        main()
