"""Policy versions: publish, latest, history, follow, staleness — the one home of each.

flywheel.policy.v1 is compacted and keyed by policy name, so the latest version of every policy
survives on the topic; the full history lives in ClickHouse's ``policy_versions`` table (the sink
lands every record). Every process that reads or writes versions does it through this module:
trainers publish, rollout workers and policy servers follow, streams and rescore ask for the
latest, merge asks for the history.

Delivery: ``publish`` uses the caller's idempotent producer (acks=all) and flushes; it raises
``DeliveryError`` unless the broker acknowledged the record, so a caller never believes an
unacknowledged publish. Readers never commit: each reads the compacted topic from the beginning
with a throw-away consumer group.

Staleness has one definition: the number of versions between the policy that produced a
trajectory and the newest one (``staleness``); it is too stale when that exceeds
``Settings.max_staleness`` (``is_stale``), the one bound the router and the trainer share.
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from dataclasses import dataclass
from typing import Any, Iterator

from confluent_kafka import OFFSET_BEGINNING, KafkaException, TopicPartition

from infra.runtime.errors import UserError
from infra.runtime.kafka_clients import DeliveryTracker, flush_or_raise, make_consumer, read_to_end
from infra.runtime.settings import Settings
from infra.runtime.topics import TOPICS, topic_name
from schemas.codec import DecodeError, decode, encode
from schemas.events import PolicyVersion

log = logging.getLogger("flywheel.versions")


# ---------------------------------------------------------------- staleness


def staleness(latest: int, produced: int) -> int:
    """How many versions behind ``latest`` a trajectory produced by version ``produced`` is."""
    return max(0, latest - produced)


def is_stale(latest: int, produced: int, max_staleness: int) -> bool:
    """True when the trajectory must not be trained on (more than ``max_staleness`` behind)."""
    return staleness(latest, produced) > max_staleness


# ---------------------------------------------------------------- publish


def publish(producer, tracker: DeliveryTracker, settings: Settings, pv: PolicyVersion) -> None:
    """Announce ``pv`` (its weights must already be in the blob store); acknowledged or raises."""
    producer.produce(topic_name(TOPICS.policy, settings), key=pv.policy.encode(), value=encode(pv), on_delivery=tracker)
    flush_or_raise(producer, tracker)


# ---------------------------------------------------------------- read the topic


def scan(settings: Settings, policy: str | None = None, timeout_s: float = 15.0) -> list[PolicyVersion]:
    """Every PolicyVersion still on the compacted topic (for ``policy`` if given), in topic order.

    Undecodable records are skipped with a warning: the sink dead-letters them.
    """
    topic = topic_name(TOPICS.policy, settings)
    found: list[PolicyVersion] = []
    try:
        for msg in read_to_end(settings, topic, timeout_s):
            if msg.value() is None:
                continue  # a tombstone
            try:
                pv = decode(msg.value(), PolicyVersion)
            except DecodeError as exc:
                log.warning("skipping undecodable record at %s/%d@%d: %s", topic, msg.partition(), msg.offset(), exc)
                continue
            if policy is None or pv.policy == policy:
                found.append(pv)
    except KafkaException as exc:
        raise UserError(f"cannot read {topic} on {settings.bootstrap}: {exc}; run `flywheel topics` first") from None
    except TimeoutError as exc:
        raise UserError(str(exc)) from None
    return found


def latest(settings: Settings, policy: str, timeout_s: float = 15.0) -> PolicyVersion | None:
    """The newest published version of ``policy``, or None when it was never published."""
    versions = scan(settings, policy, timeout_s)
    return max(versions, key=lambda v: v.version) if versions else None


def next_version(settings: Settings, policy: str, current: int) -> int:
    """The number of the next version of ``policy``: one past both what this trainer holds and
    the newest anyone published, so PPO, SFT, CT, DPO and merge share one counter per policy name."""
    published = latest(settings, policy)
    return max(current, published.version if published is not None else -1) + 1


def latest_by_policy(versions: list[PolicyVersion]) -> dict[str, int]:
    """policy name -> newest version number, from any list of versions."""
    out: dict[str, int] = {}
    for pv in versions:
        out[pv.policy] = max(out.get(pv.policy, pv.version), pv.version)
    return out


# ---------------------------------------------------------------- history (topic + ClickHouse)


def clickhouse_history(settings: Settings, policy: str) -> list[PolicyVersion]:
    """The full history from ClickHouse; empty (with a warning) when ClickHouse is not reachable."""
    # local: loads clickhouse-connect, needed only on this path
    from infra.clickhouse.query import execute

    q = policy.replace("\\", "\\\\").replace("'", "\\'")
    sql = ("SELECT policy, version, kind, uri, sha256, parent, toFloat64(created_at), metrics, config "
           f"FROM policy_versions FINAL WHERE policy = '{q}' ORDER BY version")
    try:
        _, rows, _ = execute(settings, sql)
    except Exception as exc:  # the topic may be all there is (no sink running): say so, go on
        log.warning("ClickHouse lookup of %s versions failed: %s", policy, exc)
        return []
    return [PolicyVersion(policy=r[0], version=int(r[1]), kind=r[2], uri=r[3], sha256=r[4],
                          parent=None if r[5] is None else int(r[5]), created_at=float(r[6]),
                          metrics=dict(r[7]), config=json.loads(r[8] or "{}")) for r in rows]


def history(settings: Settings, policy: str, wanted: list[int] | None = None,
            timeout_s: float = 15.0) -> dict[int, PolicyVersion]:
    """version -> PolicyVersion for ``policy``: all known ones, or at least ``wanted`` (else
    UserError), from the topic and then ClickHouse, also where the topic cannot be read (a run's
    versions outlive the broker they were published on: the sink landed them)."""
    try:
        by_version = {pv.version: pv for pv in scan(settings, policy, timeout_s)}
    except UserError as exc:  # a topic this broker never had (a run on a broker since gone): the log may hold it
        if wanted is None:
            raise
        log.warning("%s; looking in ClickHouse", exc)
        by_version = {}
    if wanted is None or any(v not in by_version for v in wanted):
        for pv in clickhouse_history(settings, policy):
            by_version.setdefault(pv.version, pv)
    if wanted is not None:
        missing = [v for v in wanted if v not in by_version]
        if missing:
            known = ", ".join(map(str, sorted(by_version))) or "none"
            raise UserError(f"policy {policy!r}: version(s) {missing} not found on the policy topic or in "
                            f"ClickHouse (known: {known})")
    return by_version


# ---------------------------------------------------------------- follow (hot reload)


@dataclass
class Announcement:
    """One record of the policy topic as a follower sees it: a version, or why it is not one."""

    msg: Any  # the confluent_kafka Message (topic, partition, offset, key, value for dead letters)
    version: PolicyVersion | None
    error: DecodeError | None = None


class VersionFollower:
    """Follows flywheel.policy.v1 from the beginning with a throw-away group and no commits.

    ``poll`` returns the next announcement (or None); ``caught_up`` turns true once every
    partition was read to the end it had when the follower started, which is when a newly
    started reader knows the latest version of every policy. Thread-safe; ``close`` is idempotent.
    """

    def __init__(self, settings: Settings, purpose: str) -> None:
        self.topic = topic_name(TOPICS.policy, settings)
        self._consumer = make_consumer(settings, f"flywheel-{purpose}-{uuid.uuid4().hex[:12]}")
        self._lock = threading.Lock()
        self._closed = False
        try:
            meta = self._consumer.list_topics(self.topic, timeout=10)
            tmeta = meta.topics.get(self.topic)
            if tmeta is None or tmeta.error is not None:
                raise UserError(f"topic {self.topic} does not exist on {settings.bootstrap}; run `flywheel topics`")
            parts = sorted(tmeta.partitions) or [0]
            ends = {p: self._consumer.get_watermark_offsets(TopicPartition(self.topic, p), timeout=10)[1] for p in parts}
        except KafkaException as exc:
            self._consumer.close()
            raise UserError(f"cannot read {self.topic} from Kafka at {settings.bootstrap}: {exc} "
                            "(is the broker up? `flywheel up`)") from None
        except UserError:
            self._consumer.close()
            raise
        self._pending_ends = {p: end for p, end in ends.items() if end > 0}
        self._consumer.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in parts])

    @property
    def caught_up(self) -> bool:
        return not self._pending_ends

    def poll(self, timeout: float) -> Announcement | None:
        with self._lock:
            if self._closed:
                return None
            msg = self._consumer.poll(timeout)
        if msg is None:
            return None
        if msg.error():
            log.warning("policy topic: %s", msg.error())
            return None
        if msg.offset() + 1 >= self._pending_ends.get(msg.partition(), 0):
            self._pending_ends.pop(msg.partition(), None)
        if msg.value() is None:
            return None  # a tombstone: nothing to load
        try:
            return Announcement(msg, decode(msg.value(), PolicyVersion))
        except DecodeError as exc:
            return Announcement(msg, None, exc)

    def until_caught_up(self, timeout_s: float) -> Iterator[Announcement]:
        """Announcements up to the ends the topic had at start (gives up after ``timeout_s``)."""
        import time

        deadline = time.monotonic() + timeout_s
        while not self.caught_up and time.monotonic() < deadline:
            ann = self.poll(0.5)
            if ann is not None:
                yield ann
        if not self.caught_up:
            log.warning("policy topic not read to its end within %.0fs; carrying on", timeout_s)

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._consumer.close()
