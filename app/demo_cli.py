"""`flywheel demo` and `flywheel report` sub-commands (see app.demo)."""

from __future__ import annotations

import argparse

from app.demo_config import DemoConfig
from infra.runtime.config import add_arguments, resolve
from infra.runtime.settings import Settings, load_settings, log_settings


def cmd_demo(args: argparse.Namespace) -> int:
    # local: loads confluent-kafka, numpy, needed only on this path
    from app.demo import run_demo
    from app.demo_report import exit_code

    settings = load_settings(vars(args))
    log_settings(settings)
    # non-zero when the run made no RL update: a script, CI or ablation reading the exit code
    # learns that the figures are the starting policy's, not a trained one's
    return exit_code(run_demo(resolve(DemoConfig, vars(args)), settings))


def register(subparsers) -> None:
    p = subparsers.add_parser("demo", help="the whole closed learning loop, with live progress and a report")
    add_arguments(p, DemoConfig)
    add_arguments(p, Settings)
    p.set_defaults(func=cmd_demo)
