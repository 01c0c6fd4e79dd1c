"""Stream-processor throughput and latency on the real broker, side by side in one run.

Run: python -m benchmarks.bench_streams [--episodes 8400] [--steps 10] [--latency-episodes 100]
         [--before-src PATH]
(8,400 episodes of 10 steps are 100,800 step events: started + 10 steps + ended each.)

1. backlog: the episodes are produced to a fresh (uuid-prefixed) flywheel.steps.v1; one
   `flywheel streams` worker (subprocess) assembles, scores and routes them (fused in one agent).
   With ``--before-src`` the same is done first by the worker of another source tree (e.g. a
   checkout of an older commit), on topics of its own, so before and after are measured in one run.
2. latency: with the worker caught up, episodes are produced at a steady pace; for each, the
   time from its last event's CreateTime to its flywheel.rl.v1 record's CreateTime (p50/p99).
   The worker is then stopped.
3. Faust's floor: one Faust agent (benchmarks/bench_faust_floor.py's worker, the same Faust
   settings and event loop) that only counts the same backlog's events: no decode, no send.
4. baseline: one bare confluent-kafka loop in this process doing the same fused work over the
   same steps: one consumer on the steps topic, the same decode, the same stage functions of
   streams.topology (assemble, then scorer -> router with ``run_chain``), every record produced to
   its topic (trajectories, scored, sft/ct/rl, on scratch topics), the same delivery settings
   (idempotent producer, acks=all, linger 5 ms, no compression, 1 MiB batches; outputs flushed
   before offsets are committed, every 1 s like the worker's commit interval). It keeps the
   assembler state in a dict, with no changelog.

events/s = step events / (last flywheel.rl.v1 record's CreateTime - first
flywheel.trajectories.v1 record's CreateTime), so start-up and the backlog's production are not
counted (the floor: first to last counted event). Prints each figure and the ratios worker /
floor and worker / bare loop. Topics are deleted afterwards. Without FLYWHEEL_KAFKA_BOOTSTRAP or
a running `flywheel up` broker, a broker is started for the run (infra/kafka/own_broker.py).
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

from confluent_kafka import KafkaException, TopicPartition
from infra.kafka.own_broker import broker_for_benchmarks

from infra.runtime.admin import delete_topics, ensure_topics
from infra.runtime.kafka_clients import DeliveryTracker, flush_or_raise, high_watermarks, make_consumer, make_producer
from infra.runtime.settings import load_settings
from infra.runtime.topics import TOPICS, topic_name
from schemas.base import now
from schemas.codec import decode, encode
from streams.route import get_rule
from streams.score import make_scorer
from benchmarks.fakes import episode_events  # test fakes: benchmarks/fakes.py
from streams.topology import encoded, pipeline, run_chain, run_keyed

ROOT = Path(__file__).resolve().parents[1]
SAME_DELIVERY = {"linger.ms": 5, "compression.type": "none", "batch.size": 1 << 20}  # acks=all, idempotent: defaults


def produce(settings, events, pace_s: float = 0.0) -> dict[str, float]:
    """Produce events; returns each episode's last-event produce time (ms, CreateTime)."""
    producer, tracker = make_producer(settings), DeliveryTracker()
    name, last = topic_name(TOPICS.steps, settings), {}
    for ev in events:
        ts_ms = int(time.time() * 1000)
        value = encode(ev)
        while True:
            try:
                producer.produce(name, key=ev.episode_id.encode(), value=value, timestamp=ts_ms, on_delivery=tracker)
                break
            except BufferError:  # librdkafka's local queue (100k messages) is full: let deliveries drain it
                producer.poll(0.5)
        producer.poll(0)
        last[ev.episode_id] = ts_ms
        if pace_s and ev.kind in ("ended", "aborted"):
            producer.flush()
            time.sleep(pace_s)
    flush_or_raise(producer, tracker)
    return last


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system, all threads) a process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_for_records(settings, spec, want: int, timeout: float, worker=None) -> None:
    """Until ``spec``'s topic holds ``want`` records (its offsets: no transactions, no compaction)."""
    consumer = make_consumer(settings, f"bench-wm-{uuid.uuid4().hex[:8]}")
    name, deadline, have = topic_name(spec, settings), time.time() + timeout, 0
    try:
        while time.time() < deadline:
            have = sum(high_watermarks(consumer, name).values())
            if have >= want:
                return
            if worker is not None and worker.poll() is not None:
                raise SystemExit(f"the streams worker exited with {worker.returncode} ({have}/{want} on {spec.name})")
            time.sleep(0.5)
    finally:
        consumer.close()
    raise SystemExit(f"only {have}/{want} records on {spec.name} after {timeout:.0f}s")


def wait_for_members(settings, group: str, n: int, timeout: float) -> None:
    """Until the consumer group is Stable with ``n`` members."""
    from confluent_kafka.admin import AdminClient

    from infra.runtime.kafka_clients import client_config
    admin, deadline = AdminClient(client_config(settings)), time.time() + timeout
    while time.time() < deadline:
        try:
            desc = admin.describe_consumer_groups([group])[group].result(timeout=10)
        except KafkaException:  # the group's coordinator is not up yet (the group does not exist yet)
            desc = None
        if desc is not None and len(desc.members) == n and str(desc.state).endswith("STABLE"):
            return
        time.sleep(1.0)
    raise SystemExit(f"the {n} workers did not settle in group {group} within {timeout:.0f}s")


def edge_timestamp(settings, spec, last: bool) -> int:
    """CreateTime (ms) of the first (or last) record of ``spec``'s topic over all partitions."""
    consumer = make_consumer(settings, f"bench-ts-{uuid.uuid4().hex[:8]}")
    name = topic_name(spec, settings)
    try:
        ends = {p: end for p, end in high_watermarks(consumer, name).items() if end > 0}
        consumer.assign([TopicPartition(name, p, end - 1 if last else 0) for p, end in ends.items()])
        stamps: dict[int, int] = {}
        deadline = time.time() + 30
        while len(stamps) < len(ends) and time.time() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                stamps.setdefault(msg.partition(), msg.timestamp()[1])
    finally:
        consumer.close()
    return max(stamps.values()) if last else min(stamps.values())


def span_s(settings) -> float:
    return (edge_timestamp(settings, TOPICS.rl, last=True) - edge_timestamp(settings, TOPICS.trajectories, last=False)) / 1000


def bare_loop(source, scratch, n_episodes: int, group: str, commit_interval_s: float = 1.0) -> float:
    """The same fused work in one bare confluent-kafka loop, until every episode reached rl;
    -> the CPU seconds this process used from its first record to the end."""
    assemble, score, route = pipeline(make_scorer("rule-v1"), get_rule("flywheel-v1"), {}, 4)
    out = {spec.name: topic_name(spec, scratch) for stage in (assemble, score, route) for spec in stage.outputs}
    consumer = make_consumer(source, group)
    consumer.subscribe([topic_name(TOPICS.steps, source)])
    producer, tracker = make_producer(scratch, **SAME_DELIVERY), DeliveryTracker()
    states, to_rl, committed, cpu0, dirty = {}, 0, time.monotonic(), None, False
    while to_rl < n_episodes:
        for msg in consumer.consume(500, 0.2):
            cpu0 = time.process_time() if cpu0 is None else cpu0
            dirty = True
            if msg.error():
                continue
            record = decode(msg.value(), assemble.model)  # the synthetic input is valid: no DLQ branch
            key = record.episode_id.encode()
            states[key], outputs = run_keyed(assemble, states.get(key), record, now())
            for _, traj in list(outputs):
                outputs += run_chain((score, route), traj, now())
            for spec, value in encoded(outputs):
                producer.produce(out[spec.name], key=key, value=value, partition=msg.partition(),
                                 on_delivery=tracker)
                to_rl += spec == TOPICS.rl
            producer.poll(0)
        if dirty and time.monotonic() - committed >= commit_interval_s:
            flush_or_raise(producer, tracker)  # outputs acknowledged before the offsets move
            consumer.commit(asynchronous=False)
            committed, dirty = time.monotonic(), False
    flush_or_raise(producer, tracker)
    if dirty:
        consumer.commit(asynchronous=False)
    used = time.process_time() - cpu0
    consumer.close()
    return used


def faust_floor(settings, n: int) -> float:
    """Faust's floor on the backlog's steps topic: an agent that only counts ``n`` events."""
    out = Path(tempfile.mkdtemp()) / "floor.txt"
    proc = subprocess.run([sys.executable, "-m", "benchmarks.bench_faust_floor", "--worker",
                           topic_name(TOPICS.steps, settings), str(n), str(out)],
                          cwd=ROOT, env=dict(os.environ, FLYWHEEL_LOGLEVEL="warning"), timeout=1800,
                          capture_output=True)
    if not out.exists():
        raise SystemExit(f"the floor worker exited with {proc.returncode}: {proc.stderr.decode()[-2000:]}")
    first, last, _ = (float(x) for x in out.read_text().split())
    return n / (last - first)


def measure_latency(settings, run_id: str, n: int, steps: int, pace_s: float) -> list[float]:
    lat_eps = [episode_events(f"lat-{run_id}-{i}", steps) for i in range(n)]
    consumer, name = make_consumer(settings, f"bench-lat-{run_id}"), topic_name(TOPICS.rl, settings)
    consumer.assign([TopicPartition(name, p, end) for p, end in high_watermarks(consumer, name).items()])
    last = produce(settings, [ev for eps in lat_eps for ev in eps], pace_s=pace_s)
    lat_ms, deadline = [], time.time() + 120
    while len(lat_ms) < len(lat_eps) and time.time() < deadline:
        msg = consumer.poll(0.5)
        if msg is None or msg.error():
            continue
        key = msg.key().decode()
        if key in last:
            lat_ms.append(msg.timestamp()[1] - last.pop(key))
    consumer.close()
    return sorted(lat_ms)


def measure_worker(src: Path, label: str, args, run_id: str, data_dir: str) -> dict:
    """One backlog through the worker(s) of source tree ``src`` on topics of their own; -> the
    settings, events, events/s, events per CPU second and latencies (ms, sorted)."""
    tag = f"{run_id}{label}"
    settings = load_settings({"data_dir": data_dir, "topic_prefix": f"b{tag}."})
    created = ensure_topics(settings).created
    env = dict(os.environ, FLYWHEEL_KAFKA_BOOTSTRAP=settings.bootstrap, FLYWHEEL_TOPIC_PREFIX=settings.topic_prefix,
               FLYWHEEL_DATA_DIR=data_dir, FLYWHEEL_LOGLEVEL="warning", FLYWHEEL_STANDBY_REPLICAS="0")
    events = [ev for i in range(args.episodes) for ev in episode_events(f"ep-{tag}-{i}", args.steps, success=i % 2 == 0)]
    workers: list[subprocess.Popen] = []
    result = {"settings": settings, "created": created, "events": len(events), "lat_ms": []}
    try:
        workers = [subprocess.Popen([sys.executable, "-m", "app.cli", "streams"], cwd=src, env=env,
                                    stdout=open(Path(data_dir) / f"worker-{label}-{i}.log", "wb"),
                                    stderr=subprocess.STDOUT)
                   for i in range(args.workers)]
        worker = workers[0]
        if args.workers > 1:  # the group settled first: a rebalance inside the measured span is not scaling
            wait_for_members(settings, f"{settings.topic_prefix}flywheel-streams", args.workers, 300)
        produce(settings, events)
        wait_for_records(settings, TOPICS.trajectories, 1, 300, worker)
        cpu0 = sum(cpu_s(w.pid) for w in workers)  # start-up (imports, group join, recovery) not counted
        wait_for_records(settings, TOPICS.rl, args.episodes, 1800, worker)
        cpu = sum(cpu_s(w.pid) for w in workers) - cpu0
        took = span_s(settings)
        result.update(rate=len(events) / took, per_cpu=len(events) / cpu, took=took)
        print(f"{label} worker ({src.name}, {args.workers} worker{'s' if args.workers > 1 else ''}): "
              f"{result['rate']:,.0f} events/s ({len(events)} events in {took:.2f}s; "
              f"{result['per_cpu']:,.0f} events per CPU second)", flush=True)
        if args.latency_episodes:
            lat_ms = measure_latency(settings, tag, args.latency_episodes, args.steps, args.pace_s)
            p99 = lat_ms[min(len(lat_ms) - 1, int(round(0.99 * (len(lat_ms) - 1))))]
            result["lat_ms"] = lat_ms
            print(f"{label} latency last event -> flywheel.rl.v1 over {len(lat_ms)} episodes (one every "
                  f"{args.pace_s * 1000:.0f} ms): p50 {statistics.median(lat_ms):.0f} ms, p99 {p99:.0f} ms, "
                  f"max {lat_ms[-1]:.0f} ms", flush=True)
        for w in workers:
            w.terminate()
        for w in workers:
            w.wait(60)
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
                w.wait(30)
    return result


def cleanup(settings, created: list[str]) -> None:
    from confluent_kafka.admin import AdminClient

    from infra.runtime.kafka_clients import client_config
    topics = AdminClient(client_config(settings)).list_topics(timeout=10).topics
    internal = [t for t in topics if t.startswith(settings.topic_prefix + "flywheel-streams")]
    delete_topics(settings, created + internal)  # with Faust's changelog/assignor topics


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=8400)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--latency-episodes", type=int, default=100)
    ap.add_argument("--pace-s", type=float, default=0.05, help="gap between episodes in the latency phase")
    ap.add_argument("--skip-bare", action="store_true", help="measure the worker only")
    ap.add_argument("--skip-floor", action="store_true", help="do not measure Faust's floor")
    ap.add_argument("--workers", type=int, default=1, help="Faust workers in the app's group (all started before the "
                    "backlog is read; the rate is the group's)")
    ap.add_argument("--before-src", type=Path, default=None,
                    help="first measure the worker of this source tree (e.g. a checkout of an older commit)")
    args = ap.parse_args()

    run_id = uuid.uuid4().hex[:8]
    data_dir = tempfile.mkdtemp(prefix="bench-streams-")
    results = []
    try:
        if args.before_src is not None:
            results.append(measure_worker(args.before_src.resolve(), "before", args, run_id, data_dir))
        now_ = measure_worker(ROOT, "now", args, run_id, data_dir)
        results.append(now_)
        print(f"backlog: {now_['events']} events in {args.episodes} episodes of {args.steps} steps")
        if len(results) == 2:
            print(f"ratio now / before: {now_['rate'] / results[0]['rate']:.2f} "
                  f"(per CPU second: {now_['per_cpu'] / results[0]['per_cpu']:.2f})")
        if not args.skip_floor:
            floor = faust_floor(now_["settings"], now_["events"])
            print(f"faust floor (an agent that only counts the same events): {floor:,.0f} events/s; "
                  f"ratio worker / floor: {now_['rate'] / floor:.2f}", flush=True)
        if not args.skip_bare:
            scratch = load_settings({"data_dir": data_dir, "topic_prefix": f"b{run_id}bare."})
            results.append({"settings": scratch, "created": ensure_topics(scratch).created})
            bare_cpu = bare_loop(now_["settings"], scratch, args.episodes, f"bench-bare-{run_id}")
            took = span_s(scratch)
            bare_rate = now_["events"] / took
            print(f"bare confluent-kafka loop (same decode, same fused work, same delivery settings): "
                  f"{bare_rate:,.0f} events/s ({now_['events']} events in {took:.2f}s; "
                  f"{now_['events'] / bare_cpu:,.0f} events per CPU second)")
            print(f"ratio worker / bare: {now_['rate'] / bare_rate:.2f} (per CPU second: "
                  f"{bare_cpu / now_['events'] * now_['per_cpu']:.2f})")
    finally:
        for r in results:
            cleanup(r["settings"], r["created"])


if __name__ == "__main__":
    with broker_for_benchmarks():
        main()
