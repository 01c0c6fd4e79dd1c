"""Re-scoring from history: replay flywheel.trajectories.v1 through another scorer.

No sandbox runs again: the stored trajectories go through the scorer and router stages of
``streams.topology.pipeline`` (the same declaration the Faust worker runs), fused in memory.
The results go to flywheel.scored.v1 and, routed, to flywheel.sft.v1 / flywheel.ct.v1. They go
to flywheel.rl.v1 only with ``--to-rl``: the PPO trainer would otherwise train on re-scored
copies of trajectories it already saw. Each record carries ``scorer`` and ``scorer_version``,
which are part of its ``event_id``, so consumers tell the sets apart. The router's staleness
check uses the latest policy versions read once at start (infra.runtime.versions).

Delivery guarantee: at-least-once, through the one checkpointed consume loop
(infra.runtime.consume_loop): at each checkpoint every output is acknowledged (``flush``), then every
dead letter, and only then are the replay group's offsets committed. A crash re-scores from the
last commit (a restarted replay resumes from the group's offsets; ``--since`` only places
partitions the group never committed); repeats have the same event ids. Records that do not
decode (or fail to score) go to flywheel.dlq.v1 with stage "rescore".
"""

from __future__ import annotations

import logging
import re
import threading
import time
from datetime import datetime, timezone

from confluent_kafka import OFFSET_BEGINNING, OFFSET_INVALID, TopicPartition

from infra.runtime import versions
from infra.runtime.consume_loop import ConsumeLoop, DeadLetters, GroupOffsets, LoopConfig
from infra.runtime.errors import UserError
from infra.runtime.kafka_clients import DeliveryTracker, flush_or_raise, make_consumer, make_producer
from infra.runtime.settings import Settings
from infra.runtime.topics import TOPICS, topic_name
from schemas.base import now
from schemas.codec import decode
from streams.config import RescoreConfig
from streams.judge import make_judge
from streams.route import get_rule
from streams.score import make_scorer, parse_judge_tasks
from streams.topology import Stage, StageFailed, encoded, pipeline, run_chain

log = logging.getLogger("flywheel.rescore")
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)\s*([smhd])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
COMMIT_EVERY = 500


def parse_since(text: str, clock: float | None = None) -> float | None:
    """``--since`` as unix seconds: ISO 8601, plain seconds, or a duration ago (90s, 30m, 2h, 7d)."""
    text = text.strip()
    if not text:
        return None
    clock = time.time() if clock is None else clock
    if m := _DURATION.match(text):
        return clock - float(m.group(1)) * _UNITS[m.group(2)]
    try:
        return float(text)
    except ValueError:
        pass
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        raise UserError(f"--since {text!r}: expected ISO 8601 time, unix seconds, or a duration like 2h") from None
    return (dt if dt.tzinfo else dt.replace(tzinfo=timezone.utc)).timestamp()


class _FromTime(GroupOffsets):
    """Partitions the replay group has committed resume there; the others start at ``since``
    (the first record at or after it; the partition's end when none) or at the beginning."""

    def __init__(self, consumer, since: float | None, timeout_s: float = 10.0) -> None:
        self.consumer, self.since, self.timeout_s = consumer, since, timeout_s

    def seek(self, partitions: list[TopicPartition]) -> None:
        committed = {(tp.topic, tp.partition): tp.offset
                     for tp in self.consumer.committed(partitions, timeout=self.timeout_s)}
        fresh = [tp for tp in partitions if committed.get((tp.topic, tp.partition), OFFSET_INVALID) < 0]
        if self.since is None:
            for tp in fresh:
                tp.offset = OFFSET_BEGINNING
            return
        wanted = [TopicPartition(tp.topic, tp.partition, int(self.since * 1000)) for tp in fresh]
        found = {(tp.topic, tp.partition): tp.offset
                 for tp in self.consumer.offsets_for_times(wanted, timeout=self.timeout_s)}
        for tp in fresh:
            offset = found[(tp.topic, tp.partition)]
            if offset < 0:  # no record at or after ``since``
                offset = self.consumer.get_watermark_offsets(tp, timeout=self.timeout_s)[1]
            tp.offset = offset


class _Replay:
    """The replay as a consume-loop stage: each trajectory through ``stages`` (run_chain), its
    outputs produced; ``flush`` waits for their acknowledgement."""

    def __init__(self, settings: Settings, stages: tuple[Stage, ...], producer, flush_every: int = COMMIT_EVERY) -> None:
        self.stages, self.producer, self.flush_every = stages, producer, flush_every
        self.names = {spec.name: topic_name(spec, settings) for stage in stages for spec in stage.outputs}
        self.tracker, self.pending = DeliveryTracker(), 0
        self.counts = {"consumed": 0, "scored": 0, "routed": 0, "dead": 0}

    def add(self, record, dlq: DeadLetters) -> None:
        self.counts["consumed"] += 1
        try:
            outputs = run_chain(self.stages, decode(record.value(), self.stages[0].model), now())
        except Exception as exc:  # noqa: BLE001 - errors are data: the replayed record whole
            dlq.send_record(exc.cause if isinstance(exc, StageFailed) else exc, record)
            self.counts["dead"] += 1
            return
        for spec, value in encoded(outputs):
            self.producer.produce(self.names[spec.name], key=record.key(), value=value, partition=record.partition(),
                                  on_delivery=self.tracker)
            self.counts["scored" if spec == TOPICS.scored else "routed"] += 1
        self.producer.poll(0)
        self.pending += 1

    def ready(self) -> bool:
        return self.pending >= self.flush_every

    def flush(self, dlq: DeadLetters) -> None:
        flush_or_raise(self.producer, self.tracker)  # outputs acknowledged before the offsets move
        self.pending = 0


def rescore(settings: Settings, cfg: RescoreConfig, idle_timeout_s: float = 2.0,
            stop: threading.Event | None = None) -> dict[str, int]:
    """Replay trajectories through ``cfg.scorer``; returns counts (consumed, scored, routed, dead).
    With ``until_caught_up`` it stops once no record came for ``idle_timeout_s`` and no lag is left."""
    scorer = make_scorer(cfg.scorer, make_judge(cfg.judge_url, cfg.judge_timeout_s),
                         parse_judge_tasks(cfg.judge_tasks), cfg.judge_success_at)
    latest = versions.latest_by_policy(versions.scan(settings)) if cfg.route else {}
    _, score, route = pipeline(scorer, get_rule(cfg.routing_rule), latest, settings.max_staleness, to_rl=cfg.to_rl)
    source = topic_name(TOPICS.trajectories, settings)
    group = cfg.group_id or f"flywheel-rescore-{cfg.scorer}"
    producer = make_producer(settings)
    replay = _Replay(settings, (score, route) if cfg.route else (score,), producer)
    consumer = make_consumer(settings, group)
    meta = consumer.list_topics(source, timeout=10.0).topics.get(source)
    if meta is None or meta.error is not None:
        consumer.close()
        raise UserError(f"topic {source} does not exist (run `flywheel topics`)")
    loop = ConsumeLoop(consumer, [source], replay, DeadLetters(producer, settings, "rescore"),
                       _FromTime(consumer, parse_since(cfg.since)),
                       LoopConfig(exit_when_idle_s=idle_timeout_s if cfg.until_caught_up else 0.0))
    log.info("rescore %s %s from %s (group %s)", scorer.name, scorer.version, source, group)
    loop.run(stop or threading.Event())
    log.info("rescore done: %s", replay.counts)
    return replay.counts
