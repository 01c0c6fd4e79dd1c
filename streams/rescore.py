"""Re-scoring from history: replay flywheel.trajectories.v1 through another scorer.

No sandbox runs again: the stored trajectories go through the scorer and router stages of
``streams.topology.pipeline`` (the same declaration the Faust worker runs), fused in memory.
The results go to flywheel.scored.v1 and, routed, to flywheel.sft.v1 / flywheel.ct.v1. They go
to flywheel.rl.v1 only with ``--to-rl``: the PPO trainer would otherwise train on re-scored
copies of trajectories it already saw. Each record carries ``scorer`` and ``scorer_version``,
which are part of its ``event_id``, so consumers tell the sets apart. The router's staleness
check uses the latest policy versions read once at start (infra.versions).

Delivery guarantee: at-least-once. The producer is idempotent with acks=all; offsets of the
replay's consumer group are committed only after ``flush_or_raise`` confirmed every output of
the consumed records. A crash re-scores from the last commit; repeats have the same event ids.
Records that do not decode (or fail to score) go to flywheel.dlq.v1 with stage "rescore".
"""

from __future__ import annotations

import logging
import re
import time
from datetime import datetime, timezone

from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from infra import versions
from infra.dlq import dead_letter, send_dead_letter
from infra.errors import UserError
from infra.kafka import DeliveryTracker, flush_or_raise, make_consumer, make_producer
from infra.settings import Settings
from infra.topics import TOPICS, topic_name
from schemas.base import now
from schemas.codec import decode, encode
from streams.config import RescoreConfig
from streams.judge import make_judge
from streams.route import get_rule
from streams.score import make_scorer
from streams.topology import encoded, pipeline, run_chain

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


def _start_positions(consumer, name: str, since: float | None, timeout_s: float) -> list[TopicPartition]:
    meta = consumer.list_topics(name, timeout=timeout_s).topics.get(name)
    if meta is None or meta.error is not None:
        raise UserError(f"topic {name} does not exist (run `flywheel topics`)")
    parts = sorted(meta.partitions)
    if since is None:
        return [TopicPartition(name, p, OFFSET_BEGINNING) for p in parts]
    wanted = [TopicPartition(name, p, int(since * 1000)) for p in parts]
    found = consumer.offsets_for_times(wanted, timeout=timeout_s)
    # -1 means no record at or after ``since`` in that partition: start at its end.
    out = []
    for tp in found:
        if tp.offset < 0:
            tp = TopicPartition(name, tp.partition, consumer.get_watermark_offsets(tp, timeout=timeout_s)[1])
        out.append(tp)
    return out


def rescore(settings: Settings, cfg: RescoreConfig, idle_timeout_s: float = 5.0) -> dict[str, int]:
    """Replay trajectories through ``cfg.scorer``; returns counts (consumed, scored, routed, dead)."""
    scorer = make_scorer(cfg.scorer, make_judge(cfg.judge_url, cfg.judge_timeout_s))
    latest = versions.latest_by_policy(versions.scan(settings)) if cfg.route else {}
    _, score, route = pipeline(scorer, get_rule(cfg.routing_rule), latest, cfg.max_staleness, to_rl=cfg.to_rl)
    stages = (score, route) if cfg.route else (score,)
    source = topic_name(TOPICS.trajectories, settings)
    names = {spec.name: topic_name(spec, settings) for stage in stages for spec in stage.outputs}
    group = cfg.group_id or f"flywheel-rescore-{cfg.scorer}"
    consumer = make_consumer(settings, group)
    producer, tracker = make_producer(settings), DeliveryTracker()
    counts = {"consumed": 0, "scored": 0, "routed": 0, "dead": 0}
    try:
        starts = _start_positions(consumer, source, parse_since(cfg.since), 10.0)
        ends = {tp.partition: consumer.get_watermark_offsets(tp, timeout=10.0)[1] for tp in starts}
        consumer.assign(starts)
        todo = {tp.partition for tp in starts if tp.offset == OFFSET_BEGINNING or tp.offset < ends[tp.partition]}
        todo = {p for p in todo if ends[p] > 0}
        log.info("rescore %s %s from %s (group %s): %d partition(s) to replay", scorer.name, scorer.version,
                 source, group, len(todo))
        last_msg, pending = time.time(), 0
        while todo or not cfg.until_caught_up:
            msg = consumer.poll(0.5)
            if msg is None:
                if cfg.until_caught_up and time.time() - last_msg > idle_timeout_s:
                    log.warning("rescore: no record for %.0fs before reaching the end offsets", idle_timeout_s)
                    break
                continue
            if msg.error():
                log.warning("rescore: consumer error %s", msg.error())
                continue
            last_msg = time.time()
            counts["consumed"] += 1
            part = msg.partition()
            if msg.offset() + 1 >= ends.get(part, 0):
                todo.discard(part)
            try:
                outputs = run_chain(stages, decode(msg.value(), score.model), now())
            except Exception as exc:  # noqa: BLE001 - errors are data
                letter = dead_letter("rescore", exc, msg.topic(), part, msg.offset(), msg.key(), msg.value())
                send_dead_letter(producer, settings, letter, msg.key(), on_delivery=tracker)
                counts["dead"] += 1
            else:
                for spec, value in encoded(outputs):
                    producer.produce(names[spec.name], key=msg.key(), value=value, partition=part,
                                     on_delivery=tracker)
                    counts["scored" if spec == TOPICS.scored else "routed"] += 1
            producer.poll(0)
            pending += 1
            if pending >= COMMIT_EVERY:
                flush_or_raise(producer, tracker)  # outputs acknowledged before the offsets move
                consumer.commit(asynchronous=False)
                pending = 0
        flush_or_raise(producer, tracker)
        if counts["consumed"]:
            consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    log.info("rescore done: %s", counts)
    return counts
