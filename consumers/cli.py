"""`flywheel sink`, `flywheel export` and `flywheel sql`."""

from __future__ import annotations

import logging

from infra.runtime.command import add_command, command_settings
from infra.runtime.config import describe, resolve
from infra.runtime.metrics import serve_metrics
from infra.runtime.procs import stop_on_signals
from infra.runtime.settings import load_settings

log = logging.getLogger("flywheel.consumers")


def cmd_sink(args) -> int:
    # local: loads chdb, clickhouse-connect, confluent-kafka, needed only on this path
    from consumers.sink import Sink, SinkConfig

    settings = command_settings(args)
    cfg = resolve(SinkConfig, vars(args))
    log.info("sink config %s", describe(cfg))
    stop = stop_on_signals(log, "stopping after a final flush")
    sink = Sink(settings, cfg)
    serve_metrics(settings, sink.metrics)
    sink.run(stop)
    return 0


def cmd_export(args) -> int:
    # local: loads confluent-kafka, numpy, needed only on this path
    from consumers.export import ExportConfig, Exporter

    settings = command_settings(args)
    cfg = resolve(ExportConfig, vars(args))
    log.info("export config %s", describe(cfg))
    Exporter(settings, cfg).run(stop_on_signals(log, "stopping after a final flush"))
    return 0


def cmd_sql(args) -> int:
    # local: loads clickhouse-connect, needed only on this path
    from infra.clickhouse.query import execute, render

    settings = load_settings(vars(args))
    columns, rows, how = execute(settings, args.statement)
    log.debug("ran on %s", how)
    print(render(columns, rows, args.format))
    return 0


def register(subparsers) -> None:
    # local: loads chdb, clickhouse-connect, confluent-kafka, numpy, needed only on this path
    from consumers.export import ExportConfig
    from consumers.sink import SinkConfig
    from infra.clickhouse.query import FORMATS

    add_command(subparsers, "sink", "write steps, trajectories, scores, policies, metrics, dead letters to ClickHouse",
                cmd_sink, SinkConfig)
    add_command(subparsers, "export", "export the SFT and CT topics as sharded JSONL / Parquet chat datasets",
                cmd_export, ExportConfig)

    p = subparsers.add_parser("sql", help="run SQL on ClickHouse (works while `flywheel sink` owns embedded chDB)")
    p.add_argument("statement", help='e.g. "SELECT * FROM v_success_by_policy"')
    p.add_argument("--format", choices=FORMATS, default="table", help="output format (default: aligned table)")
    p.set_defaults(func=cmd_sql)
