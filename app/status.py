"""`flywheel status`: local broker processes, cluster brokers, topics, consumer group lag."""

from __future__ import annotations

from infra.runtime.errors import UserError
from infra.runtime.settings import Settings
from infra.runtime.topics import TOPICS, topic_name
from infra.runtime.admin import consumer_lag
from infra.runtime.probe import require_kafka


def print_status(settings: Settings, running_cluster, show_all: bool = False) -> int:
    cluster = running_cluster(settings)
    if cluster is None:
        print("local Kafka: not running (start it with `flywheel up`)")
    else:
        pids = cluster.running()
        for node in cluster.nodes:
            state = f"pid {pids[node.node_id]}" if node.node_id in pids else "DOWN"
            print(f"local Kafka node {node.node_id}: 127.0.0.1:{node.port} {state} (log {node.log_file})")
    try:
        _, md = require_kafka(settings)
    except UserError as exc:
        print(exc)
        return 1
    brokers = ", ".join(f"{b.id}={b.host}:{b.port}" for b in sorted(md.brokers.values(), key=lambda b: b.id))
    print(f"cluster at {settings.bootstrap}: {len(md.brokers)} broker(s): {brokers}")

    catalog = {topic_name(s, settings): s for s in TOPICS.all()}
    names = sorted(n for n in md.topics if not n.startswith("__"))
    shown = names if show_all else [n for n in names if n in catalog]
    print("topics:")
    for name in sorted(set(shown) | set(catalog)):
        t = md.topics.get(name)
        if t is None:
            print(f"  {name:40s} MISSING (create it with `flywheel topics`)")
            continue
        replicas = len(next(iter(t.partitions.values())).replicas) if t.partitions else 0
        print(f"  {name:40s} {len(t.partitions):3d} partitions  replication {replicas}")
    hidden = len(names) - len(shown)
    if hidden:
        print(f"  (+{hidden} other topics; --all lists them)")

    lag = consumer_lag(settings)
    if not show_all:  # other prefixes (test runs) and internal topics only with --all
        lag = {g: {t: n for t, n in topics.items() if t in catalog} for g, topics in lag.items()}
    print("consumer groups (lag = messages not yet committed):")
    if not lag:
        print("  none")
    quiet = 0
    for group, topics in sorted(lag.items()):
        if not topics and not show_all:
            quiet += 1
            continue
        if not topics:
            print(f"  {group}: no committed offsets on these topics")
        for topic, n in sorted(topics.items()):
            print(f"  {group:30s} {topic:40s} {n}")
    if quiet:
        print(f"  (+{quiet} groups with no offsets on catalog topics; --all lists them)")
    return 0
