"""Dataset exporter: flywheel.sft.v1 and flywheel.ct.v1 -> sharded JSONL and Parquet.

Layout: ``<out>/<sft|ct>/p<partition>-<first offset>-<last offset>.{jsonl,parquet}``; one shard
holds at most ``shard_records`` records of one topic partition (a partial shard is written when
``flush_interval_s`` passes or on stop).

Delivery guarantee: each record lands in exactly one shard. The exporter is a stage of the
checkpointed consume loop (``infra.runtime.consume_loop``): its flush writes every pending range as a
shard (temporary file, fsync, rename); only then, after the range's dead letters were
acknowledged, does the loop commit the offsets past it. A crash after the rename but before the
commit re-reads those records; on start the exporter reads the offset ranges in the shard names
and skips records already inside a shard, so the re-read duplicates nothing. Bad records go to
flywheel.dlq.v1 (stage "export").
"""

from __future__ import annotations

import logging
import os
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from consumers.dataset import PARQUET_SCHEMA, jsonl_line, to_record
from infra.runtime.config import opt
from infra.runtime.consume_loop import ConsumeLoop, DeadLetters, LoopConfig
from infra.runtime.settings import Settings
from infra.runtime.topics import TOPICS, topic_name
from schemas.codec import decode
from schemas.events import ScoredTrajectory

log = logging.getLogger("flywheel.export")
STAGE = "export"
DATASETS = ("sft", "ct")
_SHARD = re.compile(r"^p(\d+)-(\d+)-(\d+)\.(jsonl|parquet)$")


@dataclass
class ExportConfig:
    out: str = opt("", "output folder (default <data_dir>/datasets)")
    group_id: str = opt("flywheel-export", "consumer group of the exporter")
    shard_records: int = opt(1000, "records per shard file")
    flush_interval_s: float = opt(30.0, "write a partial shard after this many seconds")
    formats: list[str] = opt(["jsonl", "parquet"], "shard formats to write, comma separated (jsonl, parquet)")
    exit_when_idle_s: float = opt(0.0, "stop after this many seconds without a record (0: run until signalled)")


@dataclass
class Pending:
    """Records of one (dataset, partition) not yet in a shard."""

    topic: str
    first: int = -1
    last: int = -1
    records: list[dict[str, Any]] = field(default_factory=list)


def shard_stem(partition: int, first: int, last: int) -> str:
    return f"p{partition:03d}-{first:012d}-{last:012d}"


def exported_upto(folder: Path) -> dict[int, int]:
    """Highest offset already inside a shard, per partition, read from the shard names."""
    out: dict[int, int] = {}
    if folder.is_dir():
        for entry in folder.iterdir():
            m = _SHARD.match(entry.name)
            if m:
                p, last = int(m.group(1)), int(m.group(3))
                out[p] = max(out.get(p, -1), last)
    return out


def _durable_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def write_shard(folder: Path, partition: int, first: int, last: int, records: list[dict], formats: list[str]) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    stem = shard_stem(partition, first, last)
    paths = []
    if "parquet" in formats:
        sink = pa.BufferOutputStream()
        pq.write_table(pa.Table.from_pylist(records, schema=PARQUET_SCHEMA), sink, compression="zstd")
        paths.append(folder / f"{stem}.parquet")
        _durable_write(paths[-1], sink.getvalue().to_pybytes())
    if "jsonl" in formats:  # written last: its presence marks a complete shard for readers
        paths.append(folder / f"{stem}.jsonl")
        _durable_write(paths[-1], b"".join(jsonl_line(r) for r in records))
    dir_fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # the renames themselves survive a power loss
    finally:
        os.close(dir_fd)
    return paths


class Exporter:
    """A consume-loop stage: ``add`` collects records per (dataset, partition), ``flush`` writes
    them as shards. ``run(stop)`` runs it on ``infra.runtime.consume_loop`` (group offsets)."""

    def __init__(self, settings: Settings, cfg: ExportConfig) -> None:
        bad = set(cfg.formats) - {"jsonl", "parquet"}
        if bad or not cfg.formats:
            raise ValueError(f"formats {cfg.formats}: choose from jsonl, parquet")
        self.settings, self.cfg = settings, cfg
        self.out = Path(cfg.out) if cfg.out else settings.data_path / "datasets"
        self.dataset_by_topic = {topic_name(getattr(TOPICS, d), settings): d for d in DATASETS}
        self.done = {d: exported_upto(self.out / d) for d in DATASETS}
        self.pending: dict[tuple[str, int], Pending] = {}
        self.shards_written = 0
        self.records_written = 0
        self.skipped_already_exported = 0
        self.dead_letters = 0

    def add(self, record: Any, dlq: DeadLetters) -> None:
        topic, partition, offset = record.topic(), record.partition(), record.offset()
        dataset = self.dataset_by_topic[topic]
        if offset <= self.done[dataset].get(partition, -1):
            self.skipped_already_exported += 1  # inside a shard already (a commit was lost): the loop still commits past it
            return
        pend = self.pending.setdefault((dataset, partition), Pending(topic))
        if pend.first < 0:
            pend.first = offset
        pend.last = offset  # a dead-lettered record is covered by the shard's range too
        try:
            pend.records.append(to_record(decode(record.value(), ScoredTrajectory), dataset))
        except Exception as exc:
            dlq.send_record(exc, record)
            self.dead_letters += 1

    def ready(self) -> bool:
        return any(len(p.records) >= self.cfg.shard_records for p in self.pending.values())

    def flush(self, dlq: DeadLetters) -> None:
        """Every pending range becomes a shard (a partial one for partitions not yet full)."""
        for (dataset, partition), pend in sorted(self.pending.items()):
            if pend.records:
                write_shard(self.out / dataset, partition, pend.first, pend.last, pend.records, self.cfg.formats)
                self.done[dataset][partition] = pend.last
                self.shards_written += 1
                self.records_written += len(pend.records)
        self.pending.clear()

    def run(self, stop: threading.Event) -> None:
        loop_cfg = LoopConfig(poll_messages=500, flush_interval_s=self.cfg.flush_interval_s,
                              exit_when_idle_s=self.cfg.exit_when_idle_s)
        ConsumeLoop.create(self.settings, self.cfg.group_id, list(self.dataset_by_topic), self, STAGE, loop_cfg).run(stop)
        log.info("export stopped: %d records in %d shards under %s (%d already exported, %d dead letters)",
                 self.records_written, self.shards_written, self.out, self.skipped_already_exported, self.dead_letters)
