"""Find published PolicyVersion records: the compacted policy topic first, ClickHouse second.

flywheel.policy.v1 is compacted (the latest version per policy survives), so older versions are
looked up in ClickHouse's ``policy_versions`` table, which keeps the full history. Reading only:
a throw-away consumer group that never commits, assigned to every partition from the start.
"""

from __future__ import annotations

import json
import logging

from confluent_kafka import KafkaException

from infra.errors import UserError
from infra.kafka import read_to_end
from infra.settings import Settings
from infra.topics import TOPICS, topic_name
from schemas.codec import DecodeError, decode
from schemas.events import PolicyVersion

log = logging.getLogger("flywheel.versions")


def scan_policy_topic(settings: Settings, policy: str | None = None, timeout_s: float = 10.0) -> list[PolicyVersion]:
    """Every PolicyVersion still on the topic (for ``policy`` if given), in topic order."""
    topic = topic_name(TOPICS.policy, settings)
    found: list[PolicyVersion] = []
    try:
        for msg in read_to_end(settings, topic, timeout_s):
            try:
                pv = decode(msg.value(), PolicyVersion)
            except DecodeError as exc:  # the sink already routes these to the DLQ; here just skip
                log.warning("skipping undecodable record at %s/%d@%d: %s", topic, msg.partition(), msg.offset(), exc)
                continue
            if policy is None or pv.policy == policy:
                found.append(pv)
    except KafkaException as exc:
        raise UserError(f"cannot read {topic} on {settings.bootstrap}: {exc}; run `flywheel topics` first") from None
    except TimeoutError as exc:
        raise UserError(str(exc)) from None
    return found


def clickhouse_versions(settings: Settings, policy: str) -> list[PolicyVersion]:
    """The full history from ClickHouse; empty when ClickHouse is not reachable."""
    from infra.ch_query import execute

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


def find_versions(settings: Settings, policy: str, wanted: list[int] | None = None) -> dict[int, PolicyVersion]:
    """version -> PolicyVersion for ``policy``: all known ones, or at least ``wanted``."""
    by_version = {pv.version: pv for pv in scan_policy_topic(settings, policy)}
    if wanted is None or any(v not in by_version for v in wanted):
        for pv in clickhouse_versions(settings, policy):
            by_version.setdefault(pv.version, pv)
    if wanted is not None:
        missing = [v for v in wanted if v not in by_version]
        if missing:
            known = ", ".join(map(str, sorted(by_version))) or "none"
            raise UserError(f"policy {policy!r}: version(s) {missing} not found on the policy topic or in "
                            f"ClickHouse (known: {known})")
    return by_version
