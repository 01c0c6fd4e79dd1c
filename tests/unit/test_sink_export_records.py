"""Exporter pieces without Kafka: chat records, shard names, resume points, durable shards."""

from __future__ import annotations

import orjson
import pyarrow.parquet as pq

from consumers.dataset import jsonl_line, to_record
from consumers.export import exported_upto, shard_stem, write_shard
from tests.fakes.run import synthetic_run


def records(n=6):
    return [to_record(s, "sft") for s in synthetic_run(n, seed=4).scored]


def test_record_alternates_assistant_and_screenshots():
    run = synthetic_run(6, seed=4)
    s = max(run.scored, key=lambda x: len(x.trajectory.steps))
    rec = to_record(s, "ct")
    steps = s.trajectory.steps
    assert rec["id"] == s.event_id and rec["dataset"] == "ct" and rec["num_steps"] == len(steps)
    assert [m["role"] for m in rec["messages"]] == ["system", "user"] + ["assistant", "user"] * (len(steps) - 1) + ["assistant"]
    first_user = rec["messages"][1]["content"]
    assert first_user[0]["text"] == steps[0].observation.instruction
    assert first_user[1]["image"] == steps[0].observation.screenshot.uri
    line = orjson.loads(jsonl_line(rec))
    assert "text" not in line["messages"][1]["content"][1]  # empty keys dropped in JSONL


def test_shard_names_give_resume_points(tmp_path):
    folder = tmp_path / "sft"
    recs = records()
    write_shard(folder, 2, 10, 15, recs, ["jsonl", "parquet"])
    write_shard(folder, 2, 16, 18, recs[:2], ["jsonl"])
    write_shard(folder, 0, 0, 3, recs[:3], ["parquet"])
    (folder / "p001-000000000000-000000000099.jsonl.tmp").write_bytes(b"partial")  # a crash mid-write
    assert exported_upto(folder) == {2: 18, 0: 3}
    assert (folder / f"{shard_stem(2, 10, 15)}.jsonl").read_bytes().count(b"\n") == len(recs)
    assert pq.read_table(folder / f"{shard_stem(2, 10, 15)}.parquet").num_rows == len(recs)
    assert exported_upto(tmp_path / "missing") == {}
