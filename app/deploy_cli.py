"""`flywheel deploy render` (see app.deploy) and `flywheel migrate` (the ClickHouse DDL)."""

from __future__ import annotations

import argparse
from pathlib import Path

from infra.runtime.command import add_command, command_settings
from infra.runtime.config import add_arguments, describe, resolve


def cmd_render(args: argparse.Namespace) -> int:
    # local: loads numpy, prometheus-client, needed only on this path
    from app.deploy import DeployConfig, describe_files, render, write

    cfg = resolve(DeployConfig, vars(args))
    files = render(cfg)
    out = Path(cfg.out)
    write(files, out)
    print(f"rendered into {out}/ ({describe(cfg)['namespace']} namespace, image {cfg.image}):")
    for line in describe_files(files):
        print(f"  {line}")
    return 0


def cmd_migrate(args: argparse.Namespace) -> int:
    # local: loads clickhouse-connect, needed only on this path
    from infra.clickhouse.client import make_client

    settings = command_settings(args)
    make_client(settings).close()  # creating the client applies every pending migration
    print(f"ClickHouse database {settings.clickhouse_database} is migrated")
    return 0


def register(subparsers) -> None:
    # local: loads numpy, prometheus-client, needed only on this path
    from app.deploy import DeployConfig

    p = subparsers.add_parser("deploy", help="render a Kubernetes deployment (Strimzi, ClickHouse, workloads) from the topic catalog")
    sub = p.add_subparsers(dest="deploy_command", metavar="ACTION", required=True)
    r = sub.add_parser("render", help="write the manifests and the Dockerfile into --out")
    add_arguments(r, DeployConfig)
    r.set_defaults(func=cmd_render)
    add_command(subparsers, "migrate", "apply the ClickHouse DDL migrations and exit", cmd_migrate)
