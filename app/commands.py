"""`flywheel kafka-fetch | up | down | status | topics`: the local Kafka and the topic catalog.

``up`` starts the local broker(s) under ``<data_dir>/kafka`` and is idempotent (``--sasl``: a
SASL_SSL listener with SCRAM-SHA-512, its CA and users made by infra.kafka.tls, and the client settings
written to ``<data_dir>/kafka/sasl.env``); ``down`` stops
whatever ``up`` started (one or three nodes); ``status`` prints the brokers, the catalog topics
with their partition counts and the lag of every consumer group; ``topics`` creates missing
catalog topics and exits 1 when an existing one drifted from the catalog.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
from pathlib import Path

from infra.runtime.config import add_arguments
from infra.runtime.errors import UserError
from infra.runtime.settings import Settings, load_settings, local_client_env_path, log_settings, write_local_client_env
from infra.kafka.broker import LocalCluster
from infra.kafka.tls import make_security
from infra.kafka.jars import fetch_jars
from app.status import print_status
from infra.runtime.admin import ensure_topics

log = logging.getLogger("flywheel.kafka")
MODES = (1, 3)


def kafka_home(settings: Settings) -> Path:
    return settings.data_path / "kafka"


def libs_dir(settings: Settings) -> Path:
    return kafka_home(settings) / "libs"


def local_cluster(settings: Settings, brokers: int = 1, sasl: bool = False):
    security = make_security(kafka_home(settings) / "security") if sasl else None
    return LocalCluster(kafka_home(settings) / f"brokers-{brokers}{'-sasl' if sasl else ''}", libs_dir(settings),
                        brokers, settings.kafka_port, settings.kafka_controller_port, security)


def running_cluster(settings: Settings):
    """The local cluster that has live nodes, or None."""
    for n in MODES:
        for sasl in (False, True):
            if sasl and not (kafka_home(settings) / f"brokers-{n}-sasl").exists():
                continue
            cluster = local_cluster(settings, n, sasl)
            if cluster.running():
                return cluster
    return None


def _settings(args: argparse.Namespace) -> Settings:
    s = load_settings(vars(args))
    log_settings(s)
    return s


def with_local_cluster(s: Settings, args: argparse.Namespace) -> Settings:
    """With no bootstrap configured, talk to the local cluster `flywheel up` started: all its
    nodes as bootstrap, and (unless set) its replication factor, so `up --brokers 3` then
    `topics` creates replicated topics."""
    cluster = None if s.kafka_bootstrap else running_cluster(s)
    if cluster is None or cluster.brokers == 1:
        return s
    replication = s.replication_factor
    if getattr(args, "replication_factor", None) is None and "FLYWHEEL_REPLICATION_FACTOR" not in os.environ:
        replication = min(cluster.brokers, 3)
    return dataclasses.replace(s, kafka_bootstrap=cluster.bootstrap, replication_factor=replication)


def cmd_kafka_fetch(args: argparse.Namespace) -> int:
    s = load_settings(vars(args))
    fetched = fetch_jars(libs_dir(s))
    print(f"Kafka jars {'fetched into' if fetched else 'already in'} {libs_dir(s)}")
    return 0


def cmd_up(args: argparse.Namespace) -> int:
    s = _settings(args)
    brokers = args.brokers
    other = running_cluster(s)
    if other is not None and (other.brokers != brokers or (other.security is not None) != args.sasl):
        raise UserError(f"a {other.brokers}-broker local Kafka{' (SASL_SSL)' if other.security else ''} is already "
                        "running; `flywheel down` it first")
    cluster = local_cluster(s, brokers, args.sasl)
    if len(cluster.running()) == brokers:
        print(f"Kafka already running: {brokers} broker(s) at {cluster.bootstrap}")
    else:
        fetch_jars(cluster.libs)
        took = cluster.start()
        print(f"Kafka up in {took:.1f}s: {brokers} broker(s) at {cluster.bootstrap} "
              f"(logs: {cluster.home}/node-*/server.log)")
    if cluster.security is None:
        local_client_env_path(s).unlink(missing_ok=True)  # a SASL broker's leftovers must not apply
    else:
        env = write_local_client_env(s, cluster.security.client_settings())
        print(f"SASL_SSL with {cluster.security.client_settings()['kafka_sasl_mechanism']}, CA and credentials "
              f"in {env}: flywheel commands on this data_dir read it; other clients: `set -a; . {env}; set +a`")
    if brokers > 1:
        print(f"`flywheel topics`/`status` use it directly; other processes need "
              f"FLYWHEEL_KAFKA_BOOTSTRAP={cluster.bootstrap} FLYWHEEL_REPLICATION_FACTOR={brokers}")
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    s = load_settings(vars(args))
    stopped = False
    for n in MODES:
        for sasl in (False, True):
            if sasl and not (kafka_home(s) / f"brokers-{n}-sasl").exists():
                continue
            cluster = local_cluster(s, n, sasl)
            if cluster.running():
                ids = cluster.stop()
                print(f"Kafka stopped: node(s) {', '.join(map(str, ids))} of the {n}-broker cluster")
                stopped = True
            if sasl:
                local_client_env_path(s).unlink(missing_ok=True)
    if not stopped:
        print("Kafka is not running")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    return print_status(with_local_cluster(load_settings(vars(args)), args), running_cluster, show_all=args.all)


def cmd_topics(args: argparse.Namespace) -> int:
    s = with_local_cluster(_settings(args), args)
    report = ensure_topics(s, fix_config=args.fix_config)
    for line in report.lines():
        print(line)
    return 1 if report.drift else 0


def register(subparsers) -> None:
    p = subparsers.add_parser("kafka-fetch", help="fetch the Kafka broker jars with mvn (once, cached)")
    add_arguments(p, Settings)
    p.set_defaults(func=cmd_kafka_fetch)

    p = subparsers.add_parser("up", help="start the local Kafka (idempotent)")
    p.add_argument("--brokers", type=int, choices=MODES, default=1,
                   help="1 node, or 3 nodes with replication 3 and min.insync.replicas 2")
    p.add_argument("--sasl", action="store_true",
                   help="SASL_SSL listener (SCRAM-SHA-512 users, a local CA and certificate) instead of PLAINTEXT")
    add_arguments(p, Settings)
    p.set_defaults(func=cmd_up)

    p = subparsers.add_parser("down", help="stop the local Kafka started by `flywheel up`")
    add_arguments(p, Settings)
    p.set_defaults(func=cmd_down)

    p = subparsers.add_parser("status", help="brokers, topics with partitions, consumer group lag")
    p.add_argument("--all", action="store_true", help="list every topic, not only the catalog's")
    add_arguments(p, Settings)
    p.set_defaults(func=cmd_status)

    p = subparsers.add_parser("topics", help="create missing catalog topics; report drift (exit 1)")
    p.add_argument("--fix-config", action="store_true",
                   help="alter drifted topic configs to the catalog's (partition counts are never changed)")
    add_arguments(p, Settings)
    p.set_defaults(func=cmd_topics)
