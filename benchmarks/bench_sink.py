"""Sink rows/s vs a bare loop doing the same job by hand, side by side in one run.

    python -m benchmarks.bench_sink [--episodes 14000] [--batch-rows 5000]

Publishes a synthetic run (about 7.5 events per episode: >= 100k events by default) to fresh
uuid-prefixed topics on the configured broker (or one started for the run when none answers,
see infra/kafka/own_broker.py), then, on the same messages:

- the sink: consume, decode with full schema validation, map, insert, commit (``consumers.sink``
  on ``infra.runtime.consume_loop``), until every row is written;
- the bare loop: a confluent-kafka consumer with the same settings, ``orjson.loads``, the same
  rows built by hand from the dicts (no validation), a column-oriented clickhouse-connect insert
  every ``--batch-rows`` rows and a synchronous commit, into another database of the same chDB
  engine.

Both rates are rows written / seconds from the first message to the last write. Prints both and
sink/bare.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import threading
import time
import uuid

import orjson
from confluent_kafka import TopicPartition

from infra.kafka.own_broker import broker_for_benchmarks

from consumers.rows import COLUMNS, row_for, ticks
from benchmarks.fakes import publish, synthetic_run  # test fakes: benchmarks/fakes.py
from consumers.sink import Sink, SinkConfig, decode_record
from infra.runtime.admin import delete_topics, ensure_topics
from infra.clickhouse.client import make_client
from infra.runtime.kafka_clients import make_consumer
from infra.runtime.settings import load_settings
from infra.runtime.topics import TOPICS, topic_name

KINDS = ("steps", "trajectories", "scored", "policy", "metrics")


# ---------------------------------------------------------------- the bare loop's hand-written rows


def _step(d: dict) -> tuple[str, tuple]:
    obs, action, thought = d["observation"], d["action"], d["thought"]
    eid = d["episode_id"]
    return "steps", (
        f"{eid}:step:{d['step_index']}", eid, d["step_index"], ticks(d["ts"]), ticks(d["started_at"]), d["policy"],
        d["policy_version"], action["type"] if action else "",
        orjson.dumps(action).decode() if action else "", thought, len(thought), len(thought.split()),
        d["raw_output"], d["parse_error"], d["logprob"], d.get("sampled", True), d["value"], d["reward"], d["done"],
        d["latency_policy_ms"], d["latency_env_ms"], d["error"], obs["instruction"], obs["screenshot"]["sha256"],
        obs["screenshot"]["uri"], obs["screen_width"], obs["screen_height"], d["next_screenshot_sha256"])


def _episode(d: dict) -> tuple[str, tuple]:
    kind, eid = d["kind"], d["episode_id"]
    if kind == "step":
        return _step(d)
    head = (f"{eid}:started" if kind == "started" else f"{eid}:end", eid, kind, ticks(d["ts"]))
    if kind == "started":
        t = d["task"]
        return "episodes", head + (t["task_id"], t["name"], t["suite"], d["sandbox"], d["worker_id"], d["policy"],
                                   d["policy_version"], None, None, None, "", None)
    if kind == "ended":
        return "episodes", head + ("", "", "", "", "", "", None, d["num_steps"], d["outcome_reward"], d["success"],
                                   d["reason"], None)
    return "episodes", head + ("", "", "", "", "", "", None, d["num_steps"], None, None, d["reason"],
                               d["infra_failure"])


def _versions(traj: dict) -> tuple[int, int]:
    v = [s["policy_version"] for s in traj["steps"]] or [0]
    return min(v), max(v)


def _trajectory(d: dict) -> tuple[str, tuple]:
    lo, hi = _versions(d)
    t, steps = d["task"], d["steps"]
    return "trajectories", (
        d["episode_id"], d["episode_id"], t["task_id"], t["name"], t["suite"],
        steps[0]["observation"]["instruction"] if steps else "", d["sandbox"], d["worker_id"], d["policy"], lo, hi,
        d["status"], len(steps), d["outcome_reward"], d["success"], d["end_reason"], d["infra_failure"],
        ticks(d["started_at"]), ticks(d["ended_at"]), max(0.0, d["ended_at"] - d["started_at"]),
        d["duplicates_dropped"], d["missing_steps"])


def _scored(d: dict) -> tuple[str, tuple]:
    tr = d["trajectory"]
    lo, hi = _versions(tr)
    return "scored", (
        f"{tr['episode_id']}:{d['scorer']}:{d['scorer_version']}", tr["episode_id"], d["scorer"], d["scorer_version"],
        tr["task"]["task_id"], tr["task"]["name"], tr["policy"], lo, hi, tr["status"], len(tr["steps"]),
        tr["success"], tr["infra_failure"], d["reward"], d["components"], d["verdict"], d["rl_eligible"],
        d["routes"], d["route_reasons"], d["anomalies"], ticks(tr["ended_at"]), ticks(d["scored_at"]))


def _policy(d: dict) -> tuple[str, tuple]:
    return "policy_versions", (
        f"{d['policy']}:{d['version']}", d["policy"], d["version"], d["kind"], d["uri"], d["sha256"], d["parent"],
        ticks(d["created_at"]), d["metrics"], orjson.dumps(d["config"]).decode())


def _metrics(d: dict) -> tuple[str, tuple]:
    return "trainer_metrics", (f"{d['run_id']}:{d['update']}", d["run_id"], d["update"], d["policy"],
                               d["policy_version"], ticks(d["ts"]), d["metrics"])


BARE_ROWS = {"steps": _episode, "trajectories": _trajectory, "scored": _scored, "policy": _policy,
             "metrics": _metrics}


def check_same_rows(run) -> None:
    """The bare loop's hand-written rows equal the sink's, so both do the same work."""
    from schemas.codec import encode

    for kind, events in zip(KINDS, (run.episode_events, run.trajectories, run.scored, run.policies, run.metrics)):
        for event in events[:50]:
            value = encode(event)
            assert BARE_ROWS[kind](orjson.loads(value)) == row_for(kind, decode_record(kind, value)), kind


# ---------------------------------------------------------------- the two contenders


def sink_rate(settings, expected_rows: int, batch_rows: int) -> tuple[float, float]:
    cfg = SinkConfig(group_id=f"bench-{uuid.uuid4().hex[:8]}", batch_rows=batch_rows, flush_interval_s=0.5,
                     query_port=-1, progress_interval_s=5.0)
    sink = Sink(settings, cfg)
    stop = threading.Event()
    worker = threading.Thread(target=sink.run, args=(stop,))
    worker.start()
    deadline = time.monotonic() + 900
    while sink.stats.rows < expected_rows and worker.is_alive() and time.monotonic() < deadline:
        time.sleep(0.02)
    stop.set()
    worker.join()
    st = sink.stats
    if st.rows < expected_rows:
        raise SystemExit(f"sink wrote {st.rows} of {expected_rows} rows")
    return st.rows / (st.last_flush_at - st.first_record_at), st.insert_s


def bare_rate(settings, bare_settings, expected_rows: int, batch_rows: int) -> float:
    kind_by_topic = {topic_name(getattr(TOPICS, k), settings): k for k in KINDS}
    consumer = make_consumer(settings, f"bench-bare-{uuid.uuid4().hex[:8]}")
    consumer.subscribe(list(kind_by_topic))
    client = make_client(bare_settings)
    buffer: dict[str, list[tuple]] = {}
    positions: dict[tuple[str, int], int] = {}
    written = buffered = 0
    first = 0.0

    def write() -> None:
        for table, rows in buffer.items():
            client.insert(table, [list(c) for c in zip(*rows)], column_names=COLUMNS[table], column_oriented=True)
        consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in positions.items()], asynchronous=False)
        buffer.clear()

    try:
        deadline = time.monotonic() + 900
        while written + buffered < expected_rows and time.monotonic() < deadline:
            for msg in consumer.consume(1000, timeout=0.2):
                if msg.error():
                    continue
                first = first or time.perf_counter()
                table, values = BARE_ROWS[kind_by_topic[msg.topic()]](orjson.loads(msg.value()))
                buffer.setdefault(table, []).append(values)
                positions[(msg.topic(), msg.partition())] = msg.offset() + 1
                buffered += 1
            if buffered >= batch_rows:
                write()
                written, buffered = written + buffered, 0
        write()
        written += buffered
        elapsed = time.perf_counter() - first
    finally:
        consumer.close()
        client.close()
    if written < expected_rows:
        raise SystemExit(f"bare loop wrote {written} of {expected_rows} rows")
    return written / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=14000)
    parser.add_argument("--batch-rows", type=int, default=5000)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    with broker_for_benchmarks(), tempfile.TemporaryDirectory() as tmp:
        settings = load_settings({"data_dir": tmp, "topic_prefix": f"bench{uuid.uuid4().hex[:8]}."})
        report = ensure_topics(settings)
        try:
            run = synthetic_run(args.episodes, seed=1)
            check_same_rows(run)
            n_rows = len(run.episode_events) + len(run.trajectories) + len(run.scored) + len(run.policies) + \
                len(run.metrics)  # one row per event
            publish(settings, run)
            del run
            sink_rps, insert_s = sink_rate(settings, n_rows, args.batch_rows)
            bare_settings = load_settings({"data_dir": tmp, "clickhouse_database": "bench_bare"})
            bare_rps = bare_rate(settings, bare_settings, n_rows, args.batch_rows)
        finally:
            delete_topics(settings, report.created)
    print(f"rows: {n_rows} ({args.episodes} episodes, one row per event; batch {args.batch_rows} rows)")
    print(f"sink (consume+decode+map+insert+commit): {sink_rps:,.0f} rows/s  (of which insert {insert_s:.2f}s)")
    print(f"bare loop (consume+orjson+rows+insert+commit): {bare_rps:,.0f} rows/s")
    print(f"ratio sink/bare: {sink_rps / bare_rps:.2f}")


if __name__ == "__main__":
    main()
