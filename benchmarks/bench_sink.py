"""Sink rows/s vs a bare clickhouse-connect insert of the same rows, in one run.

    python benchmarks/bench_sink.py [--episodes 2000]

Publishes a synthetic run to fresh uuid-prefixed topics on the broker of the settings (the
local `flywheel up` broker by default), runs the sink until every record is written
(consume + decode + map + insert + commit), then inserts the very same rows, already mapped,
with clickhouse-connect into another database of the same chDB engine, in batches of the same
size. Prints both rates and sink/bare.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import threading
import time
import uuid

from consumers.rows import rows_for
from consumers.sample import publish, synthetic_run
from consumers.sink import Sink, SinkConfig
from infra.admin import delete_topics, ensure_topics
from infra.clickhouse import make_client
from infra.settings import load_settings


def sink_rate(settings, expected_rows: int, batch_rows: int) -> tuple[float, float]:
    cfg = SinkConfig(group_id=f"bench-{uuid.uuid4().hex[:8]}", batch_rows=batch_rows, flush_interval_s=SinkConfig.flush_interval_s,
                     query_port=-1, progress_interval_s=5.0)
    sink = Sink(settings, cfg)
    stop = threading.Event()
    worker = threading.Thread(target=sink.run, args=(stop,))
    worker.start()
    deadline = time.monotonic() + 600
    while sink.stats.rows < expected_rows and worker.is_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    stop.set()
    worker.join()
    st = sink.stats
    if st.rows < expected_rows:
        raise SystemExit(f"sink wrote {st.rows} of {expected_rows} rows")
    elapsed = st.last_flush_at - st.first_record_at
    return st.rows / elapsed, st.insert_s


def bare_rate(settings, tables: dict[str, list[dict]], batch_rows: int) -> float:
    client = make_client(settings)
    try:
        t0 = time.perf_counter()
        for table, rows in tables.items():
            columns = list(rows[0])
            for i in range(0, len(rows), batch_rows):
                client.insert(table, [list(r.values()) for r in rows[i:i + batch_rows]], column_names=columns)
        elapsed = time.perf_counter() - t0
    finally:
        client.close()
    return sum(len(r) for r in tables.values()) / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=2000)
    parser.add_argument("--batch-rows", type=int, default=5000)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    with tempfile.TemporaryDirectory() as tmp:
        settings = load_settings({"data_dir": tmp, "topic_prefix": f"bench{uuid.uuid4().hex[:8]}."})
        report = ensure_topics(settings)
        try:
            run = synthetic_run(args.episodes, seed=1)
            tables: dict[str, list[dict]] = {}
            for kind, events in (("steps", run.episode_events), ("trajectories", run.trajectories),
                                 ("scored", run.scored), ("policy", run.policies), ("metrics", run.metrics)):
                for event in events:
                    for table, rows in rows_for(kind, event).items():
                        tables.setdefault(table, []).extend(rows)
            n_rows = sum(len(r) for r in tables.values())
            publish(settings, run)
            sink_rps, insert_s = sink_rate(settings, n_rows, args.batch_rows)
            bare_settings = load_settings({"data_dir": tmp, "clickhouse_database": "bench_bare"})
            bare_rps = bare_rate(bare_settings, tables, args.batch_rows)
        finally:
            delete_topics(settings, report.created)
    print(f"rows: {n_rows} ({args.episodes} episodes; batch {args.batch_rows} rows)")
    print(f"sink (consume+decode+map+insert+commit): {sink_rps:,.0f} rows/s  (of which insert {insert_s:.2f}s)")
    print(f"bare clickhouse-connect insert:          {bare_rps:,.0f} rows/s")
    print(f"ratio sink/bare: {sink_rps / bare_rps:.2f}")


if __name__ == "__main__":
    main()
