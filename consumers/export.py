"""Dataset exporter: flywheel.sft.v1 and flywheel.ct.v1 -> sharded JSONL and Parquet.

Layout: ``<out>/<sft|ct>/p<partition>-<first offset>-<last offset>.{jsonl,parquet}``; one shard
holds at most ``shard_records`` records of one topic partition (a partial shard is written when
``flush_interval_s`` passes or on stop).

Delivery guarantee: each record lands in exactly one shard. A shard is written to a temporary
file, fsynced and renamed into place; only then is the offset after its last record committed.
A crash after the rename but before the commit re-reads those records; on start the exporter
reads the offset ranges in the shard names and skips records already inside a shard, so the
re-read duplicates nothing. Bad records go to flywheel.dlq.v1 (stage "export").
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from confluent_kafka import TopicPartition

from consumers.dataset import PARQUET_SCHEMA, jsonl_line, to_record
from infra.config import opt
from infra.dlq import dead_letter, send_dead_letter
from infra.kafka import DeliveryTracker, flush_or_raise, make_consumer, make_producer
from infra.settings import Settings
from infra.topics import TOPICS, topic_name
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
    def __init__(self, settings: Settings, cfg: ExportConfig) -> None:
        bad = set(cfg.formats) - {"jsonl", "parquet"}
        if bad or not cfg.formats:
            raise ValueError(f"formats {cfg.formats}: choose from jsonl, parquet")
        self.settings, self.cfg = settings, cfg
        self.out = Path(cfg.out) if cfg.out else settings.data_path / "datasets"
        self.dataset_by_topic = {topic_name(getattr(TOPICS, d), settings): d for d in DATASETS}
        self.done = {d: exported_upto(self.out / d) for d in DATASETS}
        self.consumer = make_consumer(settings, cfg.group_id)
        self.producer = make_producer(settings)
        self.tracker = DeliveryTracker()
        self.pending: dict[tuple[str, int], Pending] = {}
        self.shards_written = 0
        self.records_written = 0
        self.skipped_already_exported = 0
        self.dead_letters = 0

    def handle(self, topic: str, partition: int, offset: int, key: bytes | None, value: bytes | None) -> None:
        dataset = self.dataset_by_topic[topic]
        pend = self.pending.setdefault((dataset, partition), Pending(topic))
        if offset <= self.done[dataset].get(partition, -1):
            self.skipped_already_exported += 1
            pend.last = max(pend.last, offset)  # still commit past it
            return
        if pend.first < 0:
            pend.first = offset
        pend.last = offset
        try:
            pend.records.append(to_record(decode(value, ScoredTrajectory), dataset))
        except Exception as exc:
            send_dead_letter(self.producer, self.settings, dead_letter(STAGE, exc, topic, partition, offset, key, value),
                             key, on_delivery=self.tracker)
            self.dead_letters += 1

    def write(self, dataset: str, partition: int) -> None:
        pend = self.pending.get((dataset, partition))
        if pend is None or pend.last < 0:
            return
        if pend.records:
            write_shard(self.out / dataset, partition, pend.first, pend.last, pend.records, self.cfg.formats)
            self.done[dataset][partition] = pend.last
            self.shards_written += 1
            self.records_written += len(pend.records)
        flush_or_raise(self.producer, self.tracker)  # dead letters of this range are acknowledged
        self.consumer.commit(offsets=[TopicPartition(pend.topic, partition, pend.last + 1)], asynchronous=False)
        del self.pending[(dataset, partition)]

    def write_all(self) -> None:
        for dataset, partition in list(self.pending):
            self.write(dataset, partition)

    def _on_revoke(self, consumer, partitions) -> None:
        self.write_all()

    def run(self, stop: threading.Event) -> None:
        self.consumer.subscribe(list(self.dataset_by_topic), on_revoke=self._on_revoke)
        last_write = last_record = time.monotonic()
        try:
            while not stop.is_set():
                msgs = self.consumer.consume(500, timeout=0.2)
                for msg in msgs:
                    if msg.error():
                        log.warning("consumer error: %s", msg.error())
                        continue
                    self.handle(msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value())
                    dataset = self.dataset_by_topic[msg.topic()]
                    if len(self.pending.get((dataset, msg.partition()), Pending("")).records) >= self.cfg.shard_records:
                        self.write(dataset, msg.partition())
                now = time.monotonic()
                if msgs:
                    last_record = now
                if now - last_write >= self.cfg.flush_interval_s:
                    self.write_all()
                    last_write = now
                if self.cfg.exit_when_idle_s and now - last_record >= self.cfg.exit_when_idle_s \
                        and self.consumer.assignment():
                    break
            self.write_all()
        finally:
            self.consumer.close()
            self.producer.flush(10)
        log.info("export stopped: %d records in %d shards under %s (%d already exported, %d dead letters)",
                 self.records_written, self.shards_written, self.out, self.skipped_already_exported, self.dead_letters)
