"""What every `flywheel <command>` repeats, written once: a sub-command whose options are its
typed config's fields followed by the platform settings group, and the settings read from the
parsed arguments (arguments > FLYWHEEL_* environment > defaults) and logged at start."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from infra.runtime.config import add_arguments
from infra.runtime.settings import Settings, load_settings, log_settings


def add_command(sub, name: str, help: str, func: Callable[[argparse.Namespace], int],
                config: type | None = None) -> argparse.ArgumentParser:
    """``flywheel <name>``: ``config``'s options, then the platform settings; runs ``func(args)``."""
    parser = sub.add_parser(name, help=help)
    if config is not None:
        add_arguments(parser, config)
    add_arguments(parser.add_argument_group("platform settings"), Settings)
    parser.set_defaults(func=func)
    return parser


def command_settings(args: argparse.Namespace) -> Settings:
    """The platform settings of a parsed command line, logged (secrets masked)."""
    settings = load_settings(vars(args))
    log_settings(settings)
    return settings
