"""Dataset exporter: SFT/CT topics -> shards, resumable without duplicates (real broker)."""

from __future__ import annotations

import threading

import orjson
import pyarrow.parquet as pq

from consumers.export import ExportConfig, Exporter
from tests.fakes.run import scored, synthetic_run
from infra.runtime.kafka_clients import DeliveryTracker, flush_or_raise, make_producer
from infra.runtime.topics import TOPICS, topic_name
from schemas.codec import encode


def produce_routed(settings, items):
    producer, tracker = make_producer(settings), DeliveryTracker()
    for s in items:
        spec = TOPICS.sft if s.verdict == 1 else TOPICS.ct
        producer.produce(topic_name(spec, settings), key=s.episode_id.encode(), value=encode(s), on_delivery=tracker)
    flush_or_raise(producer, tracker)


def export(settings, group_id, out):
    cfg = ExportConfig(out=str(out), group_id=group_id, shard_records=4, flush_interval_s=60, exit_when_idle_s=2.0)
    ex = Exporter(settings, cfg)
    ex.run(threading.Event())
    return ex


def read_ids(out):
    ids = []
    for path in sorted(out.glob("*/*.jsonl")):
        ids += [orjson.loads(line)["id"] for line in path.read_bytes().splitlines()]
    return ids


def test_export_shards_and_resumes_without_duplicates(settings, group_id, tmp_path):
    out = tmp_path / "datasets"
    run = synthetic_run(20, seed=11)
    first, second = run.scored[:12], run.scored[12:]
    produce_routed(settings, first)
    ex = export(settings, group_id, out)
    assert ex.records_written == len(first)
    # a crash after the rename but before the commit: simulated by a group with no offsets at all
    again = export(settings, group_id + "-lost-commit", out)
    assert again.records_written == 0 and again.skipped_already_exported == len(first)
    produce_routed(settings, second)
    resumed = export(settings, group_id, out)
    assert resumed.records_written == len(second) and resumed.skipped_already_exported == 0
    ids = read_ids(out)
    assert sorted(ids) == sorted(s.event_id for s in run.scored)
    assert {p.parent.name for p in out.glob("*/*.jsonl")} <= {"sft", "ct"}
    assert all(len(p.read_bytes().splitlines()) <= 4 for p in out.glob("*/*.jsonl"))
    assert sum(pq.read_metadata(p).num_rows for p in out.glob("*/*.parquet")) == len(run.scored)
    assert not list(out.glob("*/*.tmp"))


def test_record_is_a_chat_with_image_references(settings, group_id, tmp_path):
    run = synthetic_run(4, seed=12)
    traj = next(t for t in run.trajectories if len(t.steps) >= 2)
    produce_routed(settings, [scored(traj)])
    export(settings, group_id, tmp_path)
    (record,) = [orjson.loads(line) for p in tmp_path.glob("*/*.jsonl") for line in p.read_bytes().splitlines()]
    roles = [m["role"] for m in record["messages"]]
    assert roles[:3] == ["system", "user", "assistant"]
    assert roles.count("assistant") == len(traj.steps)
    images = [c["image"] for m in record["messages"] for c in m["content"] if c["type"] == "image"]
    assert images == [s.observation.screenshot.uri for s in traj.steps]
    assert record["messages"][2]["content"][0]["text"] == traj.steps[0].raw_output
