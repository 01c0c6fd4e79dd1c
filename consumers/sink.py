"""ClickHouse sink: steps, trajectories, scored, policy, metrics and dlq topics -> tables.

Delivery guarantee: at-least-once into ClickHouse, counted once. Records are decoded, mapped by
``consumers.rows.rows_for`` and buffered; a flush inserts every buffered table and only then
(after any dead letters of the batch were acknowledged by the broker) commits the consumer's
offsets, synchronously. A crash between insert and commit re-reads the batch; the tables are
ReplacingMergeTrees keyed on the event id, so the replay replaces rows instead of adding them
(count with FINAL). An insert that fails for a transient reason (ClickHouse unreachable) is
retried with backoff and nothing is committed meanwhile; a batch ClickHouse rejects for its data
is split in halves down to the rows it rejects, whose source records go to flywheel.dlq.v1 with
ClickHouse's error, and the rest is written: one bad row never stops the sink.

Bad records (undecodable, or a mapping error) go to flywheel.dlq.v1 with stage "sink" and the
batch keeps flowing; a bad record read from the DLQ topic itself is logged and skipped, since
sending it back would loop.

While it owns embedded chDB the sink also serves read-only SQL (``infra.ch_endpoint``), which
is how ``flywheel sql`` reads while the pipeline writes.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from clickhouse_connect.driver.exceptions import OperationalError
from confluent_kafka import KafkaException

from consumers.rows import EVENT_TYPE_BY_KIND, SINK_KINDS, Row, rows_for
from infra.ch_endpoint import QueryEndpoint
from infra.clickhouse import make_client
from infra.config import opt
from infra.dlq import dead_letter, send_dead_letter
from infra.kafka import DeliveryTracker, flush_or_raise, make_consumer, make_producer
from infra.settings import Settings
from infra.topics import TOPICS, topic_name
from schemas.codec import DecodeError, decode
from schemas.events import EVENT_TYPES

log = logging.getLogger("flywheel.sink")
STAGE = "sink"


@dataclass
class SinkConfig:
    group_id: str = opt("flywheel-sink", "consumer group of the sink (more sink processes share the work)")
    kinds: list[str] = opt(list(SINK_KINDS), "catalog topics to read, comma separated")
    batch_rows: int = opt(5000, "flush when this many rows are buffered")
    flush_interval_s: float = opt(2.0, "flush buffered rows at least this often (seconds)")
    poll_messages: int = opt(1000, "messages fetched per consume call")
    progress_interval_s: float = opt(10.0, "seconds between progress lines (rows/s, lag)")
    query_port: int = opt(18123, "port of the read-only SQL endpoint served while owning embedded chDB; 0 any free port, -1 off")
    exit_when_idle_s: float = opt(0.0, "stop after this many seconds with no record and no lag (0: run until signalled)")


@dataclass
class SinkStats:
    messages: int = 0
    rows: int = 0
    dead_letters: int = 0
    skipped: int = 0
    flushes: int = 0
    insert_s: float = 0.0
    first_record_at: float = 0.0  # time.monotonic() of the first record, for rates
    last_flush_at: float = 0.0
    by_table: dict[str, int] = field(default_factory=dict)


Source = tuple[str, int, int, Any, Any]  # topic, partition, offset, key, value of a row's record


def transient(exc: BaseException) -> bool:
    """Worth retrying the same rows (the server or the connection), not a verdict on the data."""
    return isinstance(exc, (OperationalError, ConnectionError, TimeoutError))


def decode_record(kind: str, value: bytes | None) -> Any:
    return decode(value, EVENT_TYPES[EVENT_TYPE_BY_KIND[kind]])


class Sink:
    """One consumer, one ClickHouse client, one buffer; ``run(stop)`` until ``stop`` is set."""

    def __init__(self, settings: Settings, cfg: SinkConfig, client=None) -> None:
        unknown = set(cfg.kinds) - set(SINK_KINDS)
        if unknown:
            raise ValueError(f"the sink does not read {sorted(unknown)}; choose from {SINK_KINDS}")
        self.settings, self.cfg = settings, cfg
        self._owns_client = client is None
        self.client = client or make_client(settings)
        self.kind_by_topic = {topic_name(getattr(TOPICS, k), settings): k for k in cfg.kinds}
        self.consumer = make_consumer(settings, cfg.group_id)
        self.producer = make_producer(settings)
        self.tracker = DeliveryTracker()
        self.buffer: dict[str, list[Row]] = {}
        self.sources: dict[str, list[Source]] = {}  # per table, the record each buffered row came from
        self._rejected: set[tuple[str, int, int]] = set()  # records dead-lettered during this flush
        self.buffered_rows = 0
        self.uncommitted = 0  # messages consumed since the last commit
        self.letters_pending = False
        self.stats = SinkStats()
        self._stop: threading.Event | None = None

    # ------------------------------------------------------------------ per record
    def handle(self, topic: str, partition: int, offset: int, key: bytes | None, value: bytes | None) -> None:
        kind = self.kind_by_topic[topic]
        try:
            tables = rows_for(kind, decode_record(kind, value))
        except Exception as exc:  # DecodeError, or a mapping bug: the record is data, not a crash
            if kind == "dlq":
                self.stats.skipped += 1
                log.error("unreadable dead letter at %s[%d]@%d skipped: %s", topic, partition, offset, exc)
                return
            level = log.debug if isinstance(exc, DecodeError) else log.exception
            level("bad record at %s[%d]@%d: %s", topic, partition, offset, exc)
            send_dead_letter(self.producer, self.settings, dead_letter(STAGE, exc, topic, partition, offset, key, value),
                             key, on_delivery=self.tracker)
            self.letters_pending = True
            self.stats.dead_letters += 1
            return
        source = (topic, partition, offset, key, value)
        for table, rows in tables.items():
            self.buffer.setdefault(table, []).extend(rows)
            self.sources.setdefault(table, []).extend([source] * len(rows))
            self.buffered_rows += len(rows)

    def _dead_letter(self, source: Source, exc: BaseException) -> None:
        topic, partition, offset, key, value = source
        if (topic, partition, offset) in self._rejected:
            return  # another row of the same record was already rejected
        self._rejected.add((topic, partition, offset))
        log.error("ClickHouse rejected a row of %s[%d]@%d: %s", topic, partition, offset, exc)
        send_dead_letter(self.producer, self.settings, dead_letter(STAGE, exc, topic, partition, offset, key, value),
                         key, on_delivery=self.tracker)
        self.letters_pending = True
        self.stats.dead_letters += 1

    # ------------------------------------------------------------------ flush = insert, then commit
    def _insert(self, table: str, rows: list[Row]) -> None:
        columns = list(rows[0])
        self.client.insert(table, [list(r.values()) for r in rows], column_names=columns)

    def _write(self, table: str, rows: list[Row], sources: list[Source]) -> int:
        """Insert ``rows``; -> rows written. Rejected rows are found by halving and dead-lettered."""
        try:
            self._insert_with_retry(table, rows)
            return len(rows)
        except Exception as exc:  # noqa: BLE001
            if transient(exc):
                raise  # stopping while ClickHouse is away: nothing is committed, the batch is re-read
            if len(rows) == 1:  # not transient: a verdict on (some of) the rows
                self._dead_letter(sources[0], exc)
                return 0
            mid = len(rows) // 2
            return self._write(table, rows[:mid], sources[:mid]) + self._write(table, rows[mid:], sources[mid:])

    def _insert_with_retry(self, table: str, rows: list[Row]) -> None:
        delay = 0.5
        while True:
            try:
                return self._insert(table, rows)
            except Exception as exc:
                if not transient(exc) or (self._stop is not None and self._stop.is_set()):
                    raise
                log.error("insert of %d rows into %s failed (%s); retrying in %.1fs, nothing committed",
                          len(rows), table, exc, delay)
                time.sleep(delay)
                delay = min(delay * 2, 30.0)

    def flush(self) -> None:
        if not self.uncommitted:
            return
        t0 = time.perf_counter()
        for table in sorted(self.buffer):
            rows = self.buffer[table]
            if rows:
                written = self._write(table, rows, self.sources[table])
                self.stats.by_table[table] = self.stats.by_table.get(table, 0) + written
                self.stats.rows += written
        self.stats.insert_s += time.perf_counter() - t0
        if self.letters_pending:
            flush_or_raise(self.producer, self.tracker)
            self.letters_pending = False
        try:
            self.consumer.commit(asynchronous=False)
        except KafkaException as exc:
            # nothing assigned to commit (e.g. revoked): the rows are written; a re-read dedupes
            log.warning("commit failed after a successful insert (%s); a replay will be deduplicated", exc)
        self.buffer.clear()
        self.sources.clear()
        self._rejected.clear()
        self.buffered_rows = 0
        self.uncommitted = 0
        self.stats.flushes += 1
        self.stats.last_flush_at = time.monotonic()

    def _on_revoke(self, consumer, partitions) -> None:
        self.flush()  # hand over the partitions with everything consumed written and committed

    # ------------------------------------------------------------------ loop
    def lag(self) -> int:
        total = 0
        for tp in self.consumer.assignment():
            try:
                # fetch responses keep the cached high watermark fresh; ask the broker only when unknown
                lo, hi = self.consumer.get_watermark_offsets(tp, cached=True)
                if hi < 0:
                    lo, hi = self.consumer.get_watermark_offsets(tp, timeout=2.0)
                pos = self.consumer.position([tp])[0].offset
            except KafkaException:
                continue
            total += max(0, hi - (pos if pos >= 0 else lo))
        return total

    def run(self, stop: threading.Event) -> SinkStats:
        self._stop = stop
        self.consumer.subscribe(list(self.kind_by_topic), on_revoke=self._on_revoke)
        endpoint = None
        if not self.settings.clickhouse_url and self.cfg.query_port >= 0:
            endpoint = QueryEndpoint(self.settings, self.cfg.query_port).start()
        last_flush = last_progress = last_record = time.monotonic()
        rows_at_progress = 0
        try:
            while not stop.is_set():
                msgs = self.consumer.consume(self.cfg.poll_messages, timeout=0.2)
                for msg in msgs:
                    if msg.error():
                        log.warning("consumer error: %s", msg.error())
                        continue
                    self.stats.messages += 1
                    self.uncommitted += 1
                    self.handle(msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value())
                now = time.monotonic()
                if msgs:
                    last_record = now
                    self.stats.first_record_at = self.stats.first_record_at or now
                if self.buffered_rows >= self.cfg.batch_rows or now - last_flush >= self.cfg.flush_interval_s:
                    self.flush()
                    last_flush = now
                if now - last_progress >= self.cfg.progress_interval_s:
                    rate = (self.stats.rows - rows_at_progress) / (now - last_progress)
                    log.info("progress: %.0f rows/s, %d rows, %d dead letters, lag %d", rate, self.stats.rows,
                             self.stats.dead_letters, self.lag())
                    last_progress, rows_at_progress = now, self.stats.rows
                if self.cfg.exit_when_idle_s and now - last_record >= self.cfg.exit_when_idle_s \
                        and not self.uncommitted and self.consumer.assignment() and self.lag() == 0:
                    log.info("idle for %.0fs with no lag: stopping", now - last_record)
                    break
            self.flush()  # final flush + commit on SIGTERM/SIGINT
        finally:
            if endpoint is not None:
                endpoint.stop()
            self.consumer.close()
            self.producer.flush(10)
            if self._owns_client:
                self.client.close()  # releases the chDB engine for whoever opens the directory next
        log.info("stopped: %d messages, %d rows %s, %d dead letters", self.stats.messages, self.stats.rows,
                 self.stats.by_table, self.stats.dead_letters)
        return self.stats
