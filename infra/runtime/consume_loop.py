"""One checkpointed consume loop for every consume -> write -> commit stage.

A stage (the ClickHouse sink, the dataset exporter, re-scoring, a learner) supplies only how to
``add`` a record and how to ``flush`` what it added (Quix Streams' ``BaseSink.add``/``flush``
under its checkpoint). The loop owns the rest: batched polling, partition assignment and
revocation, idle exit, dead-letter acknowledgement and the commit.

Delivery guarantee (at-least-once, never lost): offsets move only in ``checkpoint()``, in this
order:

1. ``stage.flush(dlq)``: the side effect (an insert, a shard file, a training step) of every
   record added since the last checkpoint. If it raises, the checkpoint is aborted: nothing is
   committed, the loop stops and re-raises, and the records are read again by the next owner.
2. ``dlq.acknowledge()``: every dead letter sent since the last checkpoint (from ``add`` or
   ``flush``) is acknowledged by the broker. A failed delivery aborts the checkpoint likewise,
   so a dead letter is never lost behind a committed offset.
3. the commit of the next offset of every (topic, partition) added since the last checkpoint:
   ``GroupOffsets`` commits the consumer group's offsets synchronously (sinks, exporter,
   rescore), waiting out a group coordinator that moves (a broker killed: up to a minute,
   ``kafka_clients.commit_offsets``); ``CheckpointFile`` writes them, keyed by (topic, partition), with the learner's
   typed state and trained ids into one atomic file (learners), then commits the group's offsets
   for lag monitoring only.

Crash window: a crash between 1 and the end of 3 re-reads the batch (never loses it); each stage
makes that replay harmless (ReplacingMergeTree tables, shard names, trained ids). A crash after 3
re-reads nothing. On revocation a checkpoint runs before the partitions are handed over, so the
next owner starts after everything this process wrote; a lost partition (the session expired)
can no longer be committed, its position is dropped and its records are read again elsewhere.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from confluent_kafka import OFFSET_STORED, KafkaException, TopicPartition
from pydantic import BaseModel

from infra.runtime.checkpoint import Checkpoint, load_checkpoint, save_checkpoint
from infra.runtime.config import opt
from infra.runtime.dlq import dead_letter, send_dead_letter
from infra.runtime.kafka_clients import DeliveryTracker, commit_offsets, flush_or_raise, make_consumer, make_producer
from infra.runtime.settings import Settings

log = logging.getLogger("flywheel.loop")

Positions = dict[tuple[str, int], int]  # (topic, partition) -> next offset to read


@dataclass
class LoopConfig:
    poll_messages: int = opt(1000, "messages fetched per consume call")
    poll_timeout_s: float = opt(0.2, "seconds one consume call waits for messages")
    flush_interval_s: float = opt(2.0, "checkpoint (flush + commit) at least this often (seconds)")
    progress_interval_s: float = opt(10.0, "seconds between progress lines (records/s, lag)")
    exit_when_idle_s: float = opt(0.0, "stop after this many seconds with no record and no lag (0: run until signalled)")


class DeadLetters:
    """The dead letters of one stage, tracked until the broker acknowledged them."""

    def __init__(self, producer: Any, settings: Settings, stage: str) -> None:
        self.producer, self.settings, self.stage = producer, settings, stage
        self.tracker = DeliveryTracker()
        self.sent = 0
        self.unacknowledged = 0

    def send(self, exc: BaseException, topic: str, partition: int, offset: int, key: Any, value: Any) -> None:
        letter = dead_letter(self.stage, exc, topic, partition, offset, key, value)
        send_dead_letter(self.producer, self.settings, letter, key, on_delivery=self.tracker)
        self.sent += 1
        self.unacknowledged += 1

    def send_record(self, exc: BaseException, record: Any) -> None:
        self.send(exc, record.topic(), record.partition(), record.offset(), record.key(), record.value())

    def acknowledge(self, timeout_s: float = 30.0) -> None:
        """Wait for the broker's acknowledgement of every letter sent; raise if one failed."""
        if self.unacknowledged:
            flush_or_raise(self.producer, self.tracker, timeout_s)
            self.unacknowledged = 0
        self.tracker.raise_if_failed()


class Stage(Protocol):
    """What a consume -> write -> commit stage supplies; the loop calls nothing else."""

    def add(self, record: Any, dlq: DeadLetters) -> None:
        """Take one record (a confluent_kafka Message). A bad one goes to ``dlq.send_record``."""

    def ready(self) -> bool:
        """True when enough is buffered to flush now rather than at the next flush interval."""

    def flush(self, dlq: DeadLetters) -> None:
        """Make every record added since the last flush durable; raise to abort the checkpoint."""

    # optional: ``committed(self) -> None``, called after each commit, for what may only follow
    # the point of no return (a learner announces the version its checkpoint holds);
    # ``tick(self) -> None``, called once per poll, records or not (a distributed learner's rank 0
    # keeps its peers alive while it waits for data).


class GroupOffsets:
    """Commit mode of sinks, the exporter and rescore: the consumer group's offsets."""

    def seek(self, partitions: list[TopicPartition]) -> None:
        """Start where the group's committed offsets say (``auto.offset.reset`` when none)."""

    def commit(self, consumer: Any, positions: Positions) -> None:
        commit_offsets(consumer, [TopicPartition(t, p, o) for (t, p), o in positions.items()])


class CheckpointFile:
    """Commit mode of learners: one atomic file (``infra.runtime.checkpoint``) is the point of no return.

    The learner reads ``checkpoint.state`` / ``checkpoint.trained`` at start and updates them in
    its ``flush``; the loop writes them with the offsets of the records that produced them.
    """

    def __init__(self, path: Path, state_type: type[BaseModel]) -> None:
        self.path = path
        self.checkpoint: Checkpoint = load_checkpoint(path, state_type)

    def seek(self, partitions: list[TopicPartition]) -> None:
        # the checkpoint's offsets win over the group's: they match the state the learner holds
        for tp in partitions:
            offset = self.checkpoint.next_offset(tp.topic, tp.partition)
            tp.offset = OFFSET_STORED if offset is None else offset

    def save(self) -> None:
        """Write the checkpoint as it stands (atomic), e.g. after a learner changed its state alone."""
        save_checkpoint(self.path, self.checkpoint)

    def commit(self, consumer: Any, positions: Positions) -> None:
        self.checkpoint.advance(positions)
        self.save()
        try:  # for lag monitoring only: the file is what a restart reads
            consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in positions.items()], asynchronous=False)
        except KafkaException as exc:
            log.warning("group commit after the checkpoint failed (%s); the checkpoint file holds the offsets", exc)


@dataclass
class LoopStats:
    messages: int = 0
    checkpoints: int = 0
    first_record_at: float = 0.0  # time.monotonic() of the first record, for rates
    last_checkpoint_at: float = 0.0


class ConsumeLoop:
    """``run(stop)`` consumes ``topics`` into ``stage`` until ``stop`` is set (or idle exit)."""

    def __init__(self, consumer: Any, topics: list[str], stage: Stage, dlq: DeadLetters,
                 commit: GroupOffsets | CheckpointFile, cfg: LoopConfig) -> None:
        self.consumer, self.topics, self.stage, self.dlq, self.committer, self.cfg = \
            consumer, topics, stage, dlq, commit, cfg
        self.positions: Positions = {}  # added since the last checkpoint
        self.stats = LoopStats()
        # a checkpoint failed: nothing more is committed, not even by the revocation that
        # close() triggers (the stage may have dropped what it failed to write)
        self.aborted = False

    @classmethod
    def create(cls, settings: Settings, group_id: str, topics: list[str], stage: Stage, stage_name: str,
               cfg: LoopConfig, commit: GroupOffsets | CheckpointFile | None = None,
               **consumer_overrides: Any) -> "ConsumeLoop":
        dlq = DeadLetters(make_producer(settings), settings, stage_name)
        consumer = make_consumer(settings, group_id, **consumer_overrides)
        return cls(consumer, topics, stage, dlq, commit or GroupOffsets(), cfg)

    # ------------------------------------------------------------------ the checkpoint
    def checkpoint(self) -> None:
        """flush -> dead letters acknowledged -> commit; any failure raises before the commit."""
        if not self.positions and not self.dlq.unacknowledged:
            return
        self.stage.flush(self.dlq)
        self.dlq.acknowledge()
        if self.positions:
            self.committer.commit(self.consumer, self.positions)
        self.positions = {}
        committed = getattr(self.stage, "committed", None)
        if committed is not None:
            committed()
        self.stats.checkpoints += 1
        self.stats.last_checkpoint_at = time.monotonic()

    def _on_assign(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        self.committer.seek(partitions)
        consumer.assign(partitions)

    def _on_revoke(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        if not self.aborted:  # hand the partitions over with everything consumed written and committed
            self.checkpoint()
        consumer.unassign()

    def _on_lost(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        gone = {(tp.topic, tp.partition) for tp in partitions}
        self.positions = {tp: o for tp, o in self.positions.items() if tp not in gone}
        log.warning("partitions lost (not committed, read again by their new owner): %s", sorted(gone))
        consumer.unassign()

    # ------------------------------------------------------------------ the loop
    def lag(self) -> int:
        return sum(self.lag_by_topic().values())

    def lag_by_topic(self) -> dict[str, int]:
        """Records between this consumer's position and the end, per topic of its assignment."""
        lag: dict[str, int] = {}
        for tp in self.consumer.assignment():
            try:
                # fetch responses keep the cached high watermark fresh; ask the broker only when unknown
                lo, hi = self.consumer.get_watermark_offsets(tp, cached=True)
                if hi < 0:
                    lo, hi = self.consumer.get_watermark_offsets(tp, timeout=2.0)
                pos = self.consumer.position([tp])[0].offset
                if pos < 0:  # nothing fetched from it yet in this session: the group's offset says where we are
                    pos = self.consumer.committed([tp], timeout=5.0)[0].offset
            except KafkaException:
                continue
            lag[tp.topic] = lag.get(tp.topic, 0) + max(0, hi - (pos if pos >= 0 else lo))
        return lag

    def _idle(self, now: float, last_record: float) -> bool:
        return bool(self.cfg.exit_when_idle_s) and now - last_record >= self.cfg.exit_when_idle_s \
            and bool(self.consumer.assignment()) and self.lag() == 0

    def run(self, stop: threading.Event) -> LoopStats:
        self.consumer.subscribe(self.topics, on_assign=self._on_assign, on_revoke=self._on_revoke,
                                on_lost=self._on_lost)
        last_checkpoint = last_progress = last_record = time.monotonic()
        messages_at_progress = 0
        tick = getattr(self.stage, "tick", None)
        failed = True
        try:
            while not stop.is_set():
                records = self.consumer.consume(self.cfg.poll_messages, timeout=self.cfg.poll_timeout_s)
                if tick is not None:
                    tick()
                for record in records:
                    if stop.is_set():  # the rest stays unadded and uncommitted: read again next time
                        break
                    if record.error():
                        log.warning("consumer error: %s", record.error())
                        continue
                    self.stage.add(record, self.dlq)
                    self.positions[(record.topic(), record.partition())] = record.offset() + 1
                    if self.stage.ready():  # a batch is full: checkpoint it before adding the next record
                        self.checkpoint()
                        last_checkpoint = time.monotonic()
                now = time.monotonic()
                if records:
                    self.stats.messages += len(records)
                    last_record = now
                    self.stats.first_record_at = self.stats.first_record_at or now
                if now - last_checkpoint >= self.cfg.flush_interval_s:
                    self.checkpoint()
                    last_checkpoint = now
                if now - last_progress >= self.cfg.progress_interval_s:
                    rate = (self.stats.messages - messages_at_progress) / (now - last_progress)
                    log.info("progress: %.0f records/s, %d records, lag %d", rate, self.stats.messages, self.lag())
                    last_progress, messages_at_progress = now, self.stats.messages
                if self._idle(now, last_record):
                    log.info("idle for %.0fs with no lag: stopping", now - last_record)
                    break
            self.checkpoint()  # the final one, on stop or idle exit
            failed = False
        finally:
            if failed:  # an aborted checkpoint: close without committing; the records are read again
                self.aborted = True
                log.error("stopping without a commit: %d partition positions left uncommitted", len(self.positions))
            self.consumer.close()
            self.dlq.producer.flush(10)
        return self.stats
