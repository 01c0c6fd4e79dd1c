"""What every `flywheel <command>` repeats, written once: a sub-command whose options are its
typed config's fields followed by the platform settings group, and the settings read from the
parsed arguments (arguments > FLYWHEEL_* environment > defaults) and logged at start."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from typing import Any

from infra.runtime.config import ConfigError, add_arguments, resolve
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


class _Refusing(argparse.ArgumentParser):
    """A parser (and, through add_subparsers, its sub-commands) that raises ConfigError where
    argparse would print and exit (a bad option; --help too)."""

    def error(self, message: str):
        raise ConfigError(message)

    def print_help(self, file=None) -> None:  # refused below, not printed
        pass

    def exit(self, status: int = 0, message: str | None = None):
        raise ConfigError(message or f"{self.prog} would exit with code {status} (--help?)")


def parse_command(register: Callable, name: str, argv: list[str]) -> dict[str, Any]:
    """``flywheel <name> <argv>`` parsed by the command's own parser (``register(sub)`` adds it):
    every option of the command and its platform settings, None where ``argv`` does not give it;
    ConfigError where argparse would refuse (an unknown, ambiguous or misspelt option)."""
    parser = _Refusing(prog="flywheel")
    register(parser.add_subparsers(dest="command"))
    return vars(parser.parse_args([name, *argv]))


def check_argv(register: Callable, name: str, argv: list[str], config: type,
               env: Mapping[str, str] | None = None) -> Any:
    """The ``config`` that ``flywheel <name> <argv>`` would run with; ConfigError unless it would
    parse, its platform settings load and its ``config`` validate. ``register(sub)`` adds the
    command (the module's own ``register``, so the parser is the real one). For a command another one starts later (the demo's trainer and
    cloning): a wrong option fails before anything runs rather than minutes in. ``env``: the
    environment the command will have (None: this process's)."""
    args = parse_command(register, name, argv)
    load_settings(args, env=env)
    cfg = resolve(config, args, env)
    if hasattr(cfg, "validate"):
        cfg.validate()
    return cfg
