"""`flywheel sink`, `flywheel export` and `flywheel sql`."""

from __future__ import annotations

import logging

from infra.runtime.config import add_arguments, describe, resolve
from infra.runtime.metrics import serve_metrics
from infra.runtime.settings import Settings, load_settings, log_settings

log = logging.getLogger("flywheel.consumers")


def _stop_on_signals():
    from infra.runtime.procs import stop_on_signals

    return stop_on_signals(log, "stopping after a final flush")


def cmd_sink(args) -> int:
    from consumers.sink import Sink, SinkConfig

    settings = load_settings(vars(args))
    cfg = resolve(SinkConfig, vars(args))
    log_settings(settings)
    log.info("sink config %s", describe(cfg))
    stop = _stop_on_signals()
    sink = Sink(settings, cfg)
    serve_metrics(settings, sink.metrics)
    sink.run(stop)
    return 0


def cmd_export(args) -> int:
    from consumers.export import ExportConfig, Exporter

    settings = load_settings(vars(args))
    cfg = resolve(ExportConfig, vars(args))
    log_settings(settings)
    log.info("export config %s", describe(cfg))
    Exporter(settings, cfg).run(_stop_on_signals())
    return 0


def cmd_sql(args) -> int:
    from infra.clickhouse.query import execute, render

    settings = load_settings(vars(args))
    columns, rows, how = execute(settings, args.statement)
    log.debug("ran on %s", how)
    print(render(columns, rows, args.format))
    return 0


def register(subparsers) -> None:
    from consumers.export import ExportConfig
    from consumers.sink import SinkConfig
    from infra.clickhouse.query import FORMATS

    p = subparsers.add_parser("sink", help="write steps, trajectories, scores, policies, metrics, dead letters to ClickHouse")
    add_arguments(p, SinkConfig)
    add_arguments(p.add_argument_group("platform settings"), Settings)
    p.set_defaults(func=cmd_sink)

    p = subparsers.add_parser("export", help="export the SFT and CT topics as sharded JSONL / Parquet chat datasets")
    add_arguments(p, ExportConfig)
    add_arguments(p.add_argument_group("platform settings"), Settings)
    p.set_defaults(func=cmd_export)

    p = subparsers.add_parser("sql", help="run SQL on ClickHouse (works while `flywheel sink` owns embedded chDB)")
    p.add_argument("statement", help='e.g. "SELECT * FROM v_success_by_policy"')
    p.add_argument("--format", choices=FORMATS, default="table", help="output format (default: aligned table)")
    p.set_defaults(func=cmd_sql)
