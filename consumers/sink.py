"""ClickHouse sink: steps, trajectories, scored, policy, metrics and dlq topics -> tables.

Delivery guarantee: at-least-once into ClickHouse, counted once. The sink is a stage of the
checkpointed consume loop (``infra.runtime.consume_loop``): ``add`` decodes a record, maps it to one row
(``consumers.rows.row_for``) and buffers it; ``flush`` inserts every buffered table; the loop
then waits for the batch's dead letters to be acknowledged and only then commits the offsets,
synchronously. A crash between insert and commit re-reads the batch; the tables are
ReplacingMergeTrees keyed on the event id, so the replay replaces rows instead of adding them
(count with FINAL). An insert that fails for a transient reason (ClickHouse unreachable) is
retried with backoff and nothing is committed meanwhile; a batch ClickHouse rejects for its data
is split in halves down to the rows it rejects, whose source records go to flywheel.dlq.v1 with
ClickHouse's error, and the rest is written: one bad row never stops the sink.

Bad records (undecodable, or a mapping error) go to flywheel.dlq.v1 with stage "sink" and the
batch keeps flowing; a bad record read from the DLQ topic itself is logged and skipped, since
sending it back would loop.

Speed: rows are tuples in column order, transposed to columns in one call at flush and inserted
column-oriented, timestamps as integer ticks; no per-row dict, no per-value conversion.

While it owns embedded chDB the sink also serves read-only SQL (``infra.clickhouse.endpoint``), which
is how ``flywheel sql`` reads while the pipeline writes.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from clickhouse_connect.driver.exceptions import OperationalError

from consumers.rows import COLUMNS, EVENT_TYPE_BY_KIND, SINK_KINDS, Values, row_for
from infra.clickhouse.endpoint import QueryEndpoint
from infra.clickhouse.client import make_client
from infra.runtime.config import opt
from infra.runtime.metrics import ProcessMetrics, process_metrics
from infra.runtime.consume_loop import ConsumeLoop, DeadLetters, LoopConfig
from infra.runtime.settings import Settings
from infra.runtime.topics import TOPICS, topic_name
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

    def loop_config(self) -> LoopConfig:
        return LoopConfig(poll_messages=self.poll_messages, flush_interval_s=self.flush_interval_s,
                          progress_interval_s=self.progress_interval_s, exit_when_idle_s=self.exit_when_idle_s)


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


def transient(exc: BaseException) -> bool:
    """Worth retrying the same rows (the server or the connection), not a verdict on the data."""
    return isinstance(exc, (OperationalError, ConnectionError, TimeoutError))


def decode_record(kind: str, value: bytes | None) -> Any:
    return decode(value, EVENT_TYPES[EVENT_TYPE_BY_KIND[kind]])


class Sink:
    """A consume-loop stage: ``add`` buffers rows, ``flush`` inserts them. ``run(stop)`` runs it."""

    def __init__(self, settings: Settings, cfg: SinkConfig, client=None, metrics: ProcessMetrics | None = None) -> None:
        unknown = set(cfg.kinds) - set(SINK_KINDS)
        if unknown:
            raise ValueError(f"the sink does not read {sorted(unknown)}; choose from {SINK_KINDS}")
        self.settings, self.cfg = settings, cfg
        self._owns_client = client is None
        self.client = client or make_client(settings)
        self.kind_by_topic = {topic_name(getattr(TOPICS, k), settings): k for k in cfg.kinds}
        self._types = {k: EVENT_TYPES[EVENT_TYPE_BY_KIND[k]] for k in cfg.kinds}
        self.rows: dict[str, list[Values]] = {}  # per table, buffered rows in COLUMNS order
        self.records: dict[str, list[Any]] = {}  # per table, the record each buffered row came from
        self.buffered_rows = 0
        self.stats = SinkStats()
        self.metrics = metrics if metrics is not None else process_metrics("sink")
        self._stop: threading.Event | None = None
        self._loop: ConsumeLoop | None = None

    # ------------------------------------------------------------------ per record
    def add(self, record: Any, dlq: DeadLetters) -> None:
        kind = self.kind_by_topic[record.topic()]
        self.metrics["flywheel_sink_records_total"].labels(topic=getattr(TOPICS, kind).name).inc()
        try:
            table, values = row_for(kind, decode(record.value(), self._types[kind]))
        except Exception as exc:  # DecodeError, or a mapping bug: the record is data, not a crash
            self._bad_record(kind, record, exc, dlq)
            return
        rows = self.rows.get(table)
        if rows is None:
            rows = self.rows[table] = []
            self.records[table] = []
        rows.append(values)
        self.records[table].append(record)
        self.buffered_rows += 1
        if not self.stats.first_record_at:
            self.stats.first_record_at = time.monotonic()

    def _bad_record(self, kind: str, record: Any, exc: BaseException, dlq: DeadLetters) -> None:
        where = f"{record.topic()}[{record.partition()}]@{record.offset()}"
        if kind == "dlq":
            self.stats.skipped += 1
            log.error("unreadable dead letter at %s skipped: %s", where, exc)
            return
        (log.debug if isinstance(exc, DecodeError) else log.exception)("bad record at %s: %s", where, exc)
        dlq.send_record(exc, record)
        self.stats.dead_letters += 1
        self.metrics["flywheel_sink_dead_letters_total"].inc()

    def ready(self) -> bool:
        return self.buffered_rows >= self.cfg.batch_rows

    # ------------------------------------------------------------------ flush = insert (the loop commits)
    def _insert(self, table: str, rows: list[Values]) -> None:
        columns = [list(c) for c in zip(*rows)]
        self.client.insert(table, columns, column_names=COLUMNS[table], column_oriented=True)

    def _write(self, table: str, rows: list[Values], records: list[Any], dlq: DeadLetters,
               rejected: set[tuple[str, int, int]]) -> int:
        """Insert ``rows``; -> rows written. Rejected rows are found by halving and dead-lettered."""
        try:
            self._insert_with_retry(table, rows)
            return len(rows)
        except Exception as exc:  # noqa: BLE001
            if transient(exc):
                raise  # stopping while ClickHouse is away: nothing is committed, the batch is re-read
            if len(rows) > 1:  # not transient: a verdict on (some of) the rows
                mid = len(rows) // 2
                return self._write(table, rows[:mid], records[:mid], dlq, rejected) + \
                    self._write(table, rows[mid:], records[mid:], dlq, rejected)
            record = records[0]
            where = (record.topic(), record.partition(), record.offset())
            if where not in rejected:  # once per record, however many of its rows were rejected
                rejected.add(where)
                log.error("ClickHouse rejected a row of %s[%d]@%d: %s", *where, exc)
                dlq.send_record(exc, record)
                self.stats.dead_letters += 1
                self.metrics["flywheel_sink_dead_letters_total"].inc()
            return 0

    def _insert_with_retry(self, table: str, rows: list[Values]) -> None:
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

    def flush(self, dlq: DeadLetters) -> None:
        t0 = time.perf_counter()
        rejected: set[tuple[str, int, int]] = set()
        for table in sorted(self.rows):
            rows = self.rows[table]
            if rows:
                written = self._write(table, rows, self.records[table], dlq, rejected)
                self.stats.by_table[table] = self.stats.by_table.get(table, 0) + written
                self.stats.rows += written
        self.stats.insert_s += time.perf_counter() - t0
        self.rows.clear()
        self.records.clear()
        self.buffered_rows = 0
        self.stats.flushes += 1
        self.stats.last_flush_at = time.monotonic()
        self.metrics["flywheel_sink_flush_seconds"].observe(time.perf_counter() - t0)
        if self._loop is not None:
            for topic, behind in self._loop.lag_by_topic().items():
                self.metrics["flywheel_sink_consumer_lag"].labels(topic=self._kind_name(topic)).set(behind)

    def _kind_name(self, topic: str) -> str:
        """The catalog name of a (prefixed) topic this sink reads, as the metrics label it."""
        return getattr(TOPICS, self.kind_by_topic[topic]).name

    # ------------------------------------------------------------------ run
    def run(self, stop: threading.Event) -> SinkStats:
        self._stop = stop
        loop = self._loop = ConsumeLoop.create(self.settings, self.cfg.group_id, list(self.kind_by_topic), self, STAGE,
                                               self.cfg.loop_config())
        endpoint = None
        if not self.settings.clickhouse_url and self.cfg.query_port >= 0:
            endpoint = QueryEndpoint(self.settings, self.cfg.query_port).start()
        try:
            loop.run(stop)
        finally:
            self.stats.messages = loop.stats.messages
            if endpoint is not None:
                endpoint.stop()
            if self._owns_client:
                self.client.close()  # releases the chDB engine for whoever opens the directory next
        log.info("stopped: %d messages, %d rows %s, %d dead letters", self.stats.messages, self.stats.rows,
                 self.stats.by_table, self.stats.dead_letters)
        return self.stats
