"""Topic administration against the catalog, and consumer-group lag.

``ensure_topics`` creates the catalog topics that are missing and reports every existing topic
that differs from the catalog (partition count, replication factor, or a config the catalog
sets). Drift is never fixed silently: configs are altered only with ``fix_config=True``, and
partition counts are never changed here, because adding partitions moves keys (an episode's
events would no longer share one partition).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from infra.runtime.errors import UserError
from infra.runtime.settings import Settings
from infra.runtime.topics import TOPICS, TopicSpec, topic_name
from infra.runtime.probe import require_kafka

CREATE_TIMEOUT_S = 30.0
BROKER_WAIT_S = 20.0


@dataclass(frozen=True)
class Drift:
    topic: str
    what: str  # "partitions", "replication" or a config key
    actual: str
    expected: str

    def __str__(self) -> str:
        if self.what == "partitions":
            return (f"drift: topic {self.topic} has {self.actual} partitions, the catalog says {self.expected} "
                    "(not changed automatically: adding partitions moves keys; recreate the topic or fix the catalog)")
        if self.what == "replication":
            return f"drift: topic {self.topic} has replication factor {self.actual}, settings say {self.expected}"
        return f"drift: topic {self.topic} has {self.what}={self.actual}, the catalog says {self.expected}"


@dataclass
class TopicReport:
    created: list[str] = field(default_factory=list)
    ok: list[str] = field(default_factory=list)
    drift: list[Drift] = field(default_factory=list)
    fixed: list[Drift] = field(default_factory=list)

    def lines(self) -> list[str]:
        out = [f"created {t}" for t in self.created] + [f"ok {t}" for t in self.ok]
        out += [f"fixed {d.topic}: {d.what}={d.expected} (was {d.actual})" for d in self.fixed]
        out += [str(d) for d in self.drift]
        return out


def specs_of(catalog) -> list[TopicSpec]:
    return catalog.all() if hasattr(catalog, "all") else list(catalog)


def min_insync(replication: int) -> int:
    return 2 if replication >= 3 else 1


def desired_config(spec: TopicSpec, settings: Settings) -> dict[str, str]:
    return spec.config(min_insync_replicas=min_insync(settings.replication_factor))


def compare(spec: TopicSpec, name: str, partitions: int, replication: int, config: dict[str, str],
            settings: Settings) -> list[Drift]:
    """Pure drift check of one existing topic against its catalog entry."""
    drift = []
    if partitions != spec.partitions:
        drift.append(Drift(name, "partitions", str(partitions), str(spec.partitions)))
    if replication != settings.replication_factor:
        drift.append(Drift(name, "replication", str(replication), str(settings.replication_factor)))
    for key, want in desired_config(spec, settings).items():
        if config.get(key) != want:
            drift.append(Drift(name, key, str(config.get(key)), want))
    return drift


def _describe_configs(admin, names: list[str]) -> dict[str, dict[str, str]]:
    from confluent_kafka.admin import ConfigResource, ResourceType

    if not names:
        return {}
    futures = admin.describe_configs([ConfigResource(ResourceType.TOPIC, n) for n in names])
    return {res.name: {k: e.value for k, e in fut.result(timeout=CREATE_TIMEOUT_S).items()}
            for res, fut in futures.items()}


def _wait_visible(admin, names: Iterable[str], timeout: float = CREATE_TIMEOUT_S) -> None:
    """Block until every topic has a leader for each partition, so clients can use it at once."""
    names = set(names)
    deadline = time.monotonic() + timeout
    while names:
        md = admin.list_topics(timeout=5)
        names = {n for n in names if n not in md.topics or md.topics[n].error is not None
                 or any(p.leader < 0 for p in md.topics[n].partitions.values())}
        if names and time.monotonic() > deadline:
            raise UserError(f"topics not ready after {timeout:.0f}s: {', '.join(sorted(names))}")
        if names:
            time.sleep(0.1)


def _code(err):
    """A KafkaError's code (None for anything else)."""
    return getattr(err, "code", lambda: None)()


def _transient(err) -> bool:
    """A request lost on the way, not refused: retried. librdkafka replaces its bootstrap broker
    handle once the cluster's metadata names the brokers, failing what was queued on it with
    _DESTROY_BROKER (seen in CI creating topics on a three-broker cluster just started)."""
    from confluent_kafka import KafkaError

    return _code(err) in (KafkaError._DESTROY_BROKER, KafkaError._TRANSPORT, KafkaError._TIMED_OUT) or bool(
        getattr(err, "retriable", lambda: False)())


def create_topics(admin, new: list, deadline: float) -> list[str]:
    """Create ``new`` (NewTopic); return the names this call created. A topic that exists already
    (another process made it) is not an error; one whose request was lost in transit is asked for
    again until ``deadline``; any other refusal is a UserError naming the topic."""
    from confluent_kafka import KafkaError

    created, pending, lost = [], list(new), set()
    while pending:
        retry = set()
        for name, fut in admin.create_topics(pending, request_timeout=CREATE_TIMEOUT_S).items():
            try:
                fut.result(timeout=CREATE_TIMEOUT_S)
                created.append(name)
            except Exception as exc:  # the error is inspected below
                err = exc.args[0] if exc.args else None
                if _code(err) == KafkaError.TOPIC_ALREADY_EXISTS:
                    if name in lost:  # our lost request had reached the controller: ours after all
                        created.append(name)
                    continue
                if _transient(err) and time.monotonic() < deadline:
                    retry.add(name)
                    continue
                raise UserError(f"could not create topic {name}: {getattr(err, 'str', lambda: str(err))()}") from None
        lost |= retry
        pending = [t for t in pending if t.topic in retry]
        if pending:
            time.sleep(0.5)
    return created


def ensure_topics(settings: Settings, catalog=TOPICS, fix_config: bool = False) -> TopicReport:
    """Create the missing catalog topics; report (and with ``fix_config`` alter) config drift."""
    from confluent_kafka.admin import NewTopic

    admin, md = require_kafka(settings)
    deadline = time.monotonic() + BROKER_WAIT_S
    while settings.replication_factor > len(md.brokers) and time.monotonic() < deadline:
        time.sleep(0.5)  # a broker that just started (or a loaded one) may be fenced briefly
        md = admin.list_topics(timeout=5)
    if settings.replication_factor > len(md.brokers):
        raise UserError(f"replication_factor={settings.replication_factor} but the cluster at "
                        f"{settings.bootstrap} has {len(md.brokers)} broker(s); set FLYWHEEL_REPLICATION_FACTOR")
    specs = {topic_name(s, settings): s for s in specs_of(catalog)}
    report = TopicReport()
    missing = [n for n in specs if n not in md.topics]
    if missing:
        new = [NewTopic(n, specs[n].partitions, settings.replication_factor, config=desired_config(specs[n], settings))
               for n in missing]
        # a request may wait CREATE_TIMEOUT_S for its answer: leave room to ask again after one timed out
        report.created += create_topics(admin, new, time.monotonic() + 3 * CREATE_TIMEOUT_S)
        _wait_visible(admin, missing)
        md = admin.list_topics(timeout=10)
    existing = [n for n in specs if n not in report.created]
    configs = _describe_configs(admin, existing)
    for name in existing:
        t = md.topics[name]
        replication = len(next(iter(t.partitions.values())).replicas) if t.partitions else 0
        drift = compare(specs[name], name, len(t.partitions), replication, configs[name], settings)
        if not drift:
            report.ok.append(name)
            continue
        fixable = [d for d in drift if d.what not in ("partitions", "replication")]
        if fix_config and fixable:
            _alter(admin, name, fixable)
            report.fixed += fixable
            drift = [d for d in drift if d not in fixable]
        report.drift += drift
    return report


def _alter(admin, name: str, drift: list[Drift]) -> None:
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    entries = [ConfigEntry(d.what, d.expected, incremental_operation=AlterConfigOpType.SET) for d in drift]
    res = ConfigResource(ResourceType.TOPIC, name, incremental_configs=entries)
    for fut in admin.incremental_alter_configs([res]).values():
        fut.result(timeout=CREATE_TIMEOUT_S)


def delete_topics(settings: Settings, names: list[str]) -> None:
    """Best-effort delete (test clean-up)."""

    admin, _ = require_kafka(settings)
    if names:
        for fut in admin.delete_topics(names, operation_timeout=CREATE_TIMEOUT_S).values():
            try:
                fut.result(timeout=CREATE_TIMEOUT_S)
            except Exception:
                pass


def consumer_lag(settings: Settings, group_prefix: str = "") -> dict[str, dict[str, int]]:
    """group -> topic -> messages not yet committed by that group (summed over partitions); only
    the groups whose id starts with ``group_prefix`` are asked (one request each).

    Only topics starting with ``settings.topic_prefix`` are counted. A partition of a topic the
    group has committed on, but not on that partition, counts in full (high watermark minus log
    start): the broker lists only committed partitions, and leaving the others out made the
    demo's task queue (the rollout group's lag over 4 partitions) read 11 right after 64 were sent.
    """
    from confluent_kafka import ConsumerGroupTopicPartitions
    from confluent_kafka.admin import OffsetSpec

    admin, md = require_kafka(settings)
    groups = [g.group_id for g in admin.list_consumer_groups(request_timeout=10).result(timeout=15).valid]
    committed: dict[str, dict[tuple[str, int], int]] = {}
    for group in sorted(g for g in groups if g.startswith(group_prefix)):
        fut = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)], request_timeout=10)[group]
        parts = fut.result(timeout=15).topic_partitions or []
        offsets = {(tp.topic, tp.partition): tp.offset for tp in parts
                   if tp.topic.startswith(settings.topic_prefix) and tp.topic in md.topics}
        for topic in {t for t, _ in offsets}:
            for p in md.topics[topic].partitions:
                offsets.setdefault((topic, p), -1)
        committed[group] = offsets
    wanted = {tp for offsets in committed.values() for tp in offsets}
    high = _offsets(admin, wanted, OffsetSpec.latest())
    low = _offsets(admin, {tp for offsets in committed.values() for tp, o in offsets.items() if o < 0},
                   OffsetSpec.earliest())
    lag: dict[str, dict[str, int]] = {}
    for group, offsets in committed.items():
        per_topic: dict[str, int] = {}
        for tp, offset in offsets.items():
            start = offset if offset >= 0 else low.get(tp, 0)
            per_topic[tp[0]] = per_topic.get(tp[0], 0) + max(0, high.get(tp, 0) - start)
        lag[group] = per_topic
    return lag


def _offsets(admin, tps: set[tuple[str, int]], spec) -> dict[tuple[str, int], int]:
    from confluent_kafka import TopicPartition

    if not tps:
        return {}
    futures = admin.list_offsets({TopicPartition(t, p): spec for t, p in tps}, request_timeout=10)
    return {(tp.topic, tp.partition): fut.result(timeout=15).offset for tp, fut in futures.items()}


def ensure_internal_topics(settings: Settings, topics: dict[str, int], config: dict[str, str],
                           timeout_s: float = 60.0) -> None:
    """Create a framework's internal topics (name -> partitions) if missing, then wait until the
    cluster's metadata lists them in several fetches in a row: a client that creates its own and
    subscribes at once can race the metadata propagation of a multi-broker cluster (Faust then
    skips the topic for good and its table recovery never starts)."""
    import time

    from confluent_kafka.admin import NewTopic

    admin, md = require_kafka(settings)
    missing = [NewTopic(n, p, settings.replication_factor, config=config) for n, p in topics.items()
               if n not in md.topics]
    futures = admin.create_topics(missing, operation_timeout=CREATE_TIMEOUT_S) if missing else {}
    for name, fut in futures.items():
        try:
            fut.result(timeout=CREATE_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 - created meanwhile by another worker is fine
            if "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise UserError(f"cannot create internal topic {name}: {exc}") from None
    deadline, streak = time.monotonic() + timeout_s, 0
    while streak < 5:  # librdkafka spreads metadata requests over the brokers
        known = admin.list_topics(timeout=10).topics
        ok = all(n in known and known[n].error is None and len(known[n].partitions) == p for n, p in topics.items())
        streak = streak + 1 if ok else 0
        if time.monotonic() > deadline:
            raise UserError(f"Kafka does not list {sorted(topics)} {timeout_s:.0f}s after creating them")
        time.sleep(0.2)
