"""Stream-processor throughput and latency on the real broker, side by side in one run.

Run: python benchmarks/bench_streams.py [--episodes 300] [--steps 10] [--latency-episodes 100]

1. backlog: N synthetic episodes are produced to a fresh (uuid-prefixed) flywheel.steps.v1;
   one `flywheel streams` worker (subprocess) assembles, scores and routes them. events/s =
   step events / (last flywheel.rl.v1 record's CreateTime - first trajectory's CreateTime),
   so the worker's start-up is not counted.
2. baseline: a bare confluent-kafka consume -> decode -> encode -> produce loop over the same
   steps topic into a scratch topic, flushed at the end: events/s of the same input.
3. latency: with the worker caught up, episodes are produced at a steady pace; for each, the
   time from its last event's CreateTime to its flywheel.rl.v1 record's CreateTime (p50/p99).

Prints the figures and the ratio worker / bare loop. Topics are deleted afterwards.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from infra.admin import delete_topics, ensure_topics
from infra.kafka import DeliveryTracker, flush_or_raise, make_consumer, make_producer
from infra.settings import load_settings
from infra.topics import TOPICS, topic_name
from schemas.codec import decode, encode
from schemas.events import EpisodeEvent
from streams.synthetic import episode_events

ROOT = Path(__file__).resolve().parents[1]


def produce(settings, events, pace_s: float = 0.0) -> dict[str, float]:
    """Produce events; returns each episode's last-event produce time (ms, CreateTime)."""
    producer, tracker = make_producer(settings), DeliveryTracker()
    name, last = topic_name(TOPICS.steps, settings), {}
    for ev in events:
        ts_ms = int(time.time() * 1000)
        producer.produce(name, key=ev.episode_id.encode(), value=encode(ev), timestamp=ts_ms, on_delivery=tracker)
        producer.poll(0)
        last[ev.episode_id] = ts_ms
        if pace_s and ev.kind in ("ended", "aborted"):
            producer.flush()
            time.sleep(pace_s)
    flush_or_raise(producer, tracker)
    return last


def collect(settings, spec, want: int, timeout: float, group: str) -> list:
    consumer = make_consumer(settings, group)
    consumer.subscribe([topic_name(spec, settings)])
    out, deadline = [], time.time() + timeout
    while len(out) < want and time.time() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            out.append(msg)
    consumer.close()
    if len(out) < want:
        raise SystemExit(f"only {len(out)}/{want} records on {spec.name} after {timeout:.0f}s")
    return out


def bare_loop(settings, scratch_settings, n: int, group: str) -> float:
    """Consume -> decode -> encode -> produce, the floor any stream processor pays."""
    consumer = make_consumer(settings, group)
    consumer.subscribe([topic_name(TOPICS.steps, settings)])
    producer, tracker = make_producer(scratch_settings), DeliveryTracker()
    out = topic_name(TOPICS.steps, scratch_settings)
    done, t0 = 0, None
    while done < n:
        msgs = consumer.consume(500, 1.0)
        for msg in msgs:
            if msg.error():
                continue
            t0 = t0 or time.perf_counter()
            ev = decode(msg.value(), EpisodeEvent)
            producer.produce(out, key=msg.key(), value=encode(ev), partition=msg.partition(), on_delivery=tracker)
            done += 1
        producer.poll(0)
    flush_or_raise(producer, tracker)
    consumer.commit(asynchronous=False)
    consumer.close()
    return n / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=300)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--latency-episodes", type=int, default=100)
    ap.add_argument("--pace-s", type=float, default=0.05, help="gap between episodes in the latency phase")
    args = ap.parse_args()

    run = uuid.uuid4().hex[:8]
    data_dir = tempfile.mkdtemp(prefix="bench-streams-")
    settings = load_settings({"data_dir": data_dir, "topic_prefix": f"b{run}."})
    scratch = load_settings({"data_dir": data_dir, "topic_prefix": f"b{run}bare."})
    created = ensure_topics(settings).created + ensure_topics(scratch).created
    env = dict(os.environ, FLYWHEEL_KAFKA_BOOTSTRAP=settings.bootstrap, FLYWHEEL_TOPIC_PREFIX=settings.topic_prefix,
               FLYWHEEL_DATA_DIR=data_dir, FLYWHEEL_LOGLEVEL="warning", FLYWHEEL_STANDBY_REPLICAS="0")
    worker = None
    try:
        episodes = [episode_events(f"ep-{run}-{i}", args.steps, success=i % 2 == 0) for i in range(args.episodes)]
        events = [ev for eps in episodes for ev in eps]
        produce(settings, events)
        print(f"backlog: {len(events)} events in {args.episodes} episodes of {args.steps} steps")

        worker = subprocess.Popen([sys.executable, "-m", "infra.app.cli", "streams"], cwd=ROOT, env=env,
                                  stdout=open(Path(data_dir) / "worker.log", "wb"), stderr=subprocess.STDOUT)
        rl = collect(settings, TOPICS.rl, args.episodes, 300, f"bench-rl-{run}")
        trajs = collect(settings, TOPICS.trajectories, args.episodes, 30, f"bench-tr-{run}")
        span_s = (max(m.timestamp()[1] for m in rl) - min(m.timestamp()[1] for m in trajs)) / 1000
        faust_rate = len(events) / span_s
        print(f"faust worker (assemble+score+route, 1 worker): {faust_rate:,.0f} events/s "
              f"({len(events)} events in {span_s:.2f}s)")

        bare_rate = bare_loop(settings, scratch, len(events), f"bench-bare-{run}")
        print(f"bare confluent-kafka consume-decode-encode-produce loop: {bare_rate:,.0f} events/s")
        print(f"ratio faust / bare: {faust_rate / bare_rate:.2f}")

        lat_eps = [episode_events(f"lat-{run}-{i}", args.steps) for i in range(args.latency_episodes)]
        consumer = make_consumer(settings, f"bench-lat-{run}")
        consumer.subscribe([topic_name(TOPICS.rl, settings)])
        consumer.poll(1.0)  # join before producing
        last = produce(settings, [ev for eps in lat_eps for ev in eps], pace_s=args.pace_s)
        lat_ms, deadline = [], time.time() + 120
        while len(lat_ms) < len(lat_eps) and time.time() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            key = msg.key().decode()
            if key in last:
                lat_ms.append(msg.timestamp()[1] - last.pop(key))
        consumer.close()
        lat_ms.sort()
        p50 = statistics.median(lat_ms)
        p99 = lat_ms[min(len(lat_ms) - 1, int(round(0.99 * (len(lat_ms) - 1))))]
        print(f"latency last event -> flywheel.rl.v1 over {len(lat_ms)} episodes "
              f"(one every {args.pace_s * 1000:.0f} ms): p50 {p50:.0f} ms, p99 {p99:.0f} ms, max {lat_ms[-1]:.0f} ms")
    finally:
        if worker is not None:
            worker.terminate()
            worker.wait(30)
        from confluent_kafka.admin import AdminClient

        from infra.kafka import client_config
        topics = AdminClient(client_config(settings)).list_topics(timeout=10).topics
        internal = [t for t in topics if t.startswith(settings.topic_prefix + "flywheel-streams")]
        delete_topics(settings, created + internal)  # with Faust's changelog/assignor topics


if __name__ == "__main__":
    main()
