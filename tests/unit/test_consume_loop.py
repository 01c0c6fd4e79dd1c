"""The checkpointed consume loop's ordering and crash windows, with a scripted record source.

No Kafka here: a fake consumer replays a fixed list of records and records every call, so the
order flush -> dead letters acknowledged -> commit can be asserted call by call. The same loop
on the real broker (SIGKILL between flush and commit, a DLQ the broker refuses) is tested in
tests/integration/test_consume_loop_kafka.py.
"""

from __future__ import annotations

import threading

import pytest
from confluent_kafka import OFFSET_STORED, KafkaError, TopicPartition
from pydantic import BaseModel

from infra.runtime.checkpoint import TrainedIds, load_checkpoint, save_checkpoint
from infra.runtime.consume_loop import CheckpointFile, ConsumeLoop, DeadLetters, GroupOffsets, LoopConfig
from infra.runtime.kafka_clients import DeliveryError, commit_offsets, commit_offsets_async
from infra.runtime.settings import load_settings
from tests.fakes.commits import FlakyCommits


class Msg:
    def __init__(self, topic, partition, offset, value=b"ok", key=b"k"):
        self._t, self._p, self._o, self._v, self._k = topic, partition, offset, value, key

    def topic(self): return self._t
    def partition(self): return self._p
    def offset(self): return self._o
    def key(self): return self._k
    def value(self): return self._v
    def error(self): return None


class FakeConsumer:
    """Hands out ``records`` in ``batch``-sized consume calls after assigning their partitions."""

    def __init__(self, records, log, batch=3, revoke_after=None, lose_after=None):
        self.records, self.all, self.log, self.batch = list(records), list(records), log, batch
        self.revoke_after, self.lose_after = revoke_after, lose_after
        self.assigned: list[TopicPartition] = []
        self.committed: list[tuple[str, int, int]] = []
        self.calls = 0
        self.closed = False

    def subscribe(self, topics, on_assign, on_revoke, on_lost):
        self.cb = (on_assign, on_revoke, on_lost)

    def consume(self, n, timeout):
        if not self.assigned:  # the first call, or a rejoin after a revocation or loss
            parts = sorted({(m.topic(), m.partition()) for m in self.all})
            self.cb[0](self, [TopicPartition(t, p) for t, p in parts])
        self.calls += 1
        if self.revoke_after == self.calls:
            self.log.append("revoke")
            self.cb[1](self, list(self.assigned))
        if self.lose_after == self.calls:
            self.log.append("lost")
            self.cb[2](self, list(self.assigned))
        out, self.records = self.records[:min(n, self.batch)], self.records[min(n, self.batch):]
        return out

    def assign(self, partitions):
        self.assigned = list(partitions)

    def unassign(self):
        self.assigned = []

    def assignment(self):
        return self.assigned

    def commit(self, offsets, asynchronous):
        assert asynchronous is False
        self.log.append("commit")
        self.committed += [(tp.topic, tp.partition, tp.offset) for tp in offsets]

    def get_watermark_offsets(self, tp, cached=False, timeout=None):
        return 0, 0

    def position(self, tps):
        return [TopicPartition(tp.topic, tp.partition, 0) for tp in tps]

    def committed(self, tps, timeout=None):
        return [TopicPartition(tp.topic, tp.partition, 0) for tp in tps]

    def close(self):
        if self.assigned:  # as librdkafka does: leaving the group revokes what it holds
            self.cb[1](self, list(self.assigned))
        self.closed = True


class FakeProducer:
    def __init__(self, log, fail=False):
        self.log, self.fail, self.queued = log, fail, []

    def produce(self, topic, key, value, on_delivery):
        self.queued.append((key, on_delivery))

    def poll(self, timeout):
        return 0

    def flush(self, timeout=None):
        if self.queued:
            self.log.append("dlq-ack")
        for key, cb in self.queued:
            msg = Msg("dlq", 0, 0, key=key)
            cb(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE) if self.fail else None, msg)
        self.queued = []
        return 0


class Stage:
    """Buffers records; a record whose value is b"bad" becomes a dead letter."""

    def __init__(self, log, fail_flush=False, ready_at=10**9):
        self.log, self.fail_flush, self.ready_at = log, fail_flush, ready_at
        self.buffer, self.written = [], []

    def add(self, record, dlq):
        if record.value() == b"bad":
            dlq.send_record(ValueError("bad record"), record)
        else:
            self.buffer.append((record.topic(), record.partition(), record.offset()))

    def ready(self):
        return len(self.buffer) >= self.ready_at

    def flush(self, dlq):
        if self.fail_flush:
            raise OSError("disk full")
        self.log.append("flush")
        self.written += self.buffer
        self.buffer = []


def make_loop(tmp_path, records, *, fail_dlq=False, commit=None, stage=None, **consumer_kw):
    log: list[str] = []
    consumer = FakeConsumer(records, log, **consumer_kw)
    settings = load_settings({"data_dir": str(tmp_path)})
    dlq = DeadLetters(FakeProducer(log, fail=fail_dlq), settings, "test")
    stage = stage or Stage(log)
    stage.log = log
    cfg = LoopConfig(flush_interval_s=3600, exit_when_idle_s=0.01, poll_timeout_s=0)
    return ConsumeLoop(consumer, ["a", "b"], stage, dlq, commit or GroupOffsets(), cfg), consumer, stage, log


def records(n, topic="a", partition=0, bad=()):
    return [Msg(topic, partition, i, b"bad" if i in bad else b"ok") for i in range(n)]


def test_flush_then_dead_letters_acknowledged_then_commit(tmp_path):
    loop, consumer, stage, log = make_loop(tmp_path, records(5, bad={3}) + records(2, "b", 0))
    loop.run(threading.Event())
    assert log == ["flush", "dlq-ack", "commit"]
    assert sorted(consumer.committed) == [("a", 0, 5), ("b", 0, 2)]  # the next offset per (topic, partition)
    assert len(stage.written) == 6 and loop.dlq.sent == 1 and consumer.closed


def test_a_failed_flush_aborts_the_checkpoint(tmp_path):
    loop, consumer, _, log = make_loop(tmp_path, records(4), stage=Stage([], fail_flush=True))
    with pytest.raises(OSError, match="disk full"):
        loop.run(threading.Event())
    assert consumer.committed == [] and "commit" not in log and consumer.closed


def test_after_a_failed_flush_the_revocation_on_close_commits_nothing(tmp_path):
    """A stage that dropped its buffer in the failed flush has nothing left to flush: the
    revocation that close() triggers must not commit the batch it never wrote."""

    class Forgetful(Stage):
        def flush(self, dlq):
            self.buffer = []  # handed to a write that failed (e.g. a learner's collective)
            if not self.log or self.log[-1] != "flush-failed":
                self.log.append("flush-failed")
                raise OSError("peer died")

    loop, consumer, _, log = make_loop(tmp_path, records(4), stage=Forgetful([]))
    with pytest.raises(OSError, match="peer died"):
        loop.run(threading.Event())
    assert consumer.committed == [] and "commit" not in log and consumer.closed


def test_a_failed_dead_letter_delivery_aborts_the_commit(tmp_path):
    loop, consumer, stage, log = make_loop(tmp_path, records(4, bad={1}), fail_dlq=True)
    with pytest.raises(DeliveryError):
        loop.run(threading.Event())
    assert stage.written  # the write happened: a replay of it is harmless, a lost dead letter is not
    assert consumer.committed == [] and log == ["flush", "dlq-ack"]


def test_ready_stage_checkpoints_without_waiting_for_the_interval(tmp_path):
    loop, consumer, stage, log = make_loop(tmp_path, records(7), stage=Stage([], ready_at=3))
    loop.run(threading.Event())
    assert log.count("flush") == 3 and [o for *_, o in consumer.committed] == [3, 6, 7]


def test_a_full_batch_is_checkpointed_before_the_next_record_of_the_same_consume_call(tmp_path):
    loop, consumer, stage, log = make_loop(tmp_path, records(10), batch=10, stage=Stage([], ready_at=4))
    loop.run(threading.Event())
    assert [o for *_, o in consumer.committed] == [4, 8, 10]  # batches of exactly 4, then the rest


def test_committed_follows_each_commit_and_a_stop_leaves_the_rest_unread(tmp_path):
    stop = threading.Event()

    class Learner(Stage):
        def flush(self, dlq):
            super().flush(dlq)
            if len(self.written) >= 4:  # e.g. max_updates reached
                stop.set()

        def committed(self):
            self.log.append("committed")

    loop, consumer, stage, log = make_loop(tmp_path, records(10), batch=10, stage=Learner([], ready_at=2))
    loop.run(stop)
    assert log == ["flush", "commit", "committed"] * 2
    assert [o for *_, o in consumer.committed] == [2, 4] and len(stage.written) == 4  # 4-9 stay for the next run


def test_revocation_checkpoints_before_the_partitions_go(tmp_path):
    loop, consumer, stage, log = make_loop(tmp_path, records(6), revoke_after=2)
    loop.run(threading.Event())
    # the first batch (offsets 0-2) is written and committed inside the revocation callback
    assert log[:3] == ["revoke", "flush", "commit"] and consumer.committed[0] == ("a", 0, 3)


def test_a_lost_partition_is_not_committed(tmp_path):
    loop, consumer, stage, log = make_loop(tmp_path, records(6), lose_after=2, batch=3)
    loop.run(threading.Event())
    assert ("a", 0, 3) not in consumer.committed  # records 0-2 will be read again by the new owner
    assert consumer.committed == [("a", 0, 6)]


class LearnerState(BaseModel):
    version: int = 0
    weights_uri: str = ""


def test_checkpoint_file_keys_offsets_by_topic_and_partition(tmp_path):
    path = tmp_path / "ckpt" / "learner.json"
    ckpt = CheckpointFile(path, LearnerState)
    assert ckpt.checkpoint.state is None and ckpt.checkpoint.offsets == {}

    class Learner(Stage):
        def flush(self, dlq):
            super().flush(dlq)
            ckpt.checkpoint.state = LearnerState(version=len(self.written), weights_uri="blob://w")
            for t, p, o in self.buffer or self.written:
                if f"{t}/{p}/{o}" not in ckpt.checkpoint.trained:
                    ckpt.checkpoint.trained.add(f"{t}/{p}/{o}", produced_by=0)

    loop, consumer, _, _ = make_loop(tmp_path, records(3, "a", 0) + records(2, "b", 0), commit=ckpt, stage=Learner([]))
    loop.run(threading.Event())
    again = load_checkpoint(path, LearnerState)
    assert again.offsets == {"a": {0: 3}, "b": {0: 2}}  # same partition number, two topics, two positions
    assert again.state == LearnerState(version=5, weights_uri="blob://w") and again.trained.total == 5
    assert not list(path.parent.glob("*.tmp-*"))

    # a restart seeks to the file's offsets, not the group's; unknown partitions keep the group's
    parts = [TopicPartition("a", 0), TopicPartition("b", 0), TopicPartition("b", 1)]
    CheckpointFile(path, LearnerState).seek(parts)
    assert [tp.offset for tp in parts] == [3, 2, OFFSET_STORED]


def test_trained_ids_stay_bounded_by_the_staleness_window(tmp_path):
    ids = TrainedIds()
    for version in range(100):
        for i in range(10):
            ids.add(f"ep-{version}-{i}", produced_by=version)
        ids.prune(latest=version, max_staleness=4)
    assert ids.total == 1000 and len(ids.recent) == 50  # versions 95..99 only
    with pytest.raises(ValueError, match="trained twice"):
        ids.add("ep-99-0", 99)
    path = tmp_path / "c.json"
    from infra.runtime.checkpoint import Checkpoint
    save_checkpoint(path, Checkpoint[LearnerState](trained=ids))
    assert load_checkpoint(path, LearnerState).trained == ids


def test_a_commit_waits_out_a_moving_coordinator_and_nothing_else():
    from confluent_kafka import KafkaException

    # the sink's failure under a killed broker (tests/e2e/test_chaos.py): retried, then committed
    moving = FlakyCommits(KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.NOT_COORDINATOR)
    offsets = [TopicPartition("t", 0, 5)]
    commit_offsets(moving, offsets, pause_s=0.0)
    assert moving.committed == [offsets] and not moving.errors
    # a lost assignment is not waited for: the loop's rebalance handling owns it
    lost = FlakyCommits(KafkaError.ILLEGAL_GENERATION)
    with pytest.raises(KafkaException, match="ILLEGAL_GENERATION"):
        commit_offsets(lost, offsets, pause_s=0.0)
    assert lost.committed == []
    # a coordinator that never comes back fails the commit once the time is up
    stuck = FlakyCommits(*[KafkaError.COORDINATOR_LOAD_IN_PROGRESS] * 1000)
    with pytest.raises(KafkaException, match="COORDINATOR_LOAD_IN_PROGRESS"):
        commit_offsets(stuck, offsets, timeout_s=0.05, pause_s=0.01)
    assert stuck.committed == []


def test_the_event_loops_commit_waits_on_the_loop_and_gives_up_when_asked():
    import asyncio

    from confluent_kafka import KafkaException

    offsets = [TopicPartition("t", 0, 5)]

    async def both():
        moving = FlakyCommits(KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.NOT_COORDINATOR)
        ticks = 0

        async def ticker():  # the loop stays free while the commit waits
            nonlocal ticks
            while not moving.committed:
                ticks += 1
                await asyncio.sleep(0.001)

        await asyncio.gather(commit_offsets_async(moving, offsets, asyncio.Event(), pause_s=0.05), ticker())
        assert moving.committed == [offsets] and ticks >= 5
        stop = asyncio.Event()
        stop.set()  # the worker is going away: no more waiting, its final commit covers it
        gone = FlakyCommits(KafkaError.COORDINATOR_LOAD_IN_PROGRESS)
        with pytest.raises(KafkaException, match="COORDINATOR_LOAD_IN_PROGRESS"):
            await commit_offsets_async(gone, offsets, stop, pause_s=0.05)
        lost = FlakyCommits(KafkaError.ILLEGAL_GENERATION)  # not the coordinator: not retried
        with pytest.raises(KafkaException, match="ILLEGAL_GENERATION"):
            await commit_offsets_async(lost, offsets, asyncio.Event(), pause_s=0.0)

    asyncio.run(both())


def test_group_offsets_commit_through_the_retrying_commit():
    moving = FlakyCommits(KafkaError.COORDINATOR_NOT_AVAILABLE)
    GroupOffsets().commit(moving, {("t", 1): 7, ("u", 0): 2})
    assert [sorted((tp.topic, tp.partition, tp.offset) for tp in c) for c in moving.committed] == [[("t", 1, 7), ("u", 0, 2)]]
