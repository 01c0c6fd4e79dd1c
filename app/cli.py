"""The `flywheel` command line. Each package contributes its sub-commands through a ``cli``
module exposing ``register(subparsers)``; each sub-command sets ``func(args) -> int``.

A wrong setting or an unreachable dependency ends in one clear line on stderr (exit 2),
never a stack trace; set FLYWHEEL_DEBUG=1 to see the trace.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

import app.commands as commands
import app.demo_cli as demo_cli
import app.deploy_cli as deploy_cli
import app.schemas_cli as schemas_cli
import app.ui.cli as ui_cli
import consumers.cli as consumers_cli
import producers.cli as producers_cli
import streams.cli as streams_cli
import trainer.cli as trainer_cli
import trainer.dpo.cli as dpo_cli
import trainer.verifier.cli as verifier_cli
from infra.runtime.config import ConfigError
from infra.runtime.errors import UserError
from infra.runtime.kafka_clients import DeliveryError

# Each package's sub-commands, in the order `flywheel --help` lists them. Registering only adds
# parsers: the heavy imports (torch, Playwright, Faust) happen when a command runs.
COMMAND_MODULES = (
    commands,
    schemas_cli,
    producers_cli,
    streams_cli,
    consumers_cli,
    trainer_cli,
    dpo_cli,
    verifier_cli,
    demo_cli,
    deploy_cli,
    ui_cli,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="flywheel",
        description="Flywheel: a Kafka-native data flywheel and streaming RL for GUI agents. "
                    "Start with `flywheel demo`; every command has --help.")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in COMMAND_MODULES:
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except (UserError, ConfigError) as exc:
        if os.environ.get("FLYWHEEL_DEBUG"):
            raise
        print(f"flywheel {args.command}: {exc}", file=sys.stderr)
        return 2
    except DeliveryError as exc:
        if os.environ.get("FLYWHEEL_DEBUG"):
            raise
        print(f"flywheel {args.command}: {exc} (does Kafka answer? try `flywheel status`)", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
