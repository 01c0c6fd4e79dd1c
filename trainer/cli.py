"""`flywheel train` (the streaming PPO trainer) and `flywheel bc` (behaviour cloning of the pixel
policy on flywheel.sft.v1: the cold start's pi_sft). The serving helpers' sub-commands (`serve`,
`merge`, `sft`, `ct`) live in trainer/serving/cli.py and are registered from here.

Both take their whole configuration as one file too (``--config PATH``: the JSON object of fields
`flywheel demo` writes for them in the run's folder, ``infra.runtime.config.config_json``): the
options given beside it override it, and it overrides FLYWHEEL_* variables."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Mapping
from typing import Any

from infra.runtime.command import add_command, command_settings
from infra.runtime.config import file_values, resolve
from infra.runtime.procs import stop_on_signals
from trainer.serving import cli as serving_cli

log = logging.getLogger("flywheel.trainer")


def cmd_train(args: argparse.Namespace) -> int:
    """One process; or ``--nproc-per-node N`` ranks started here; or one rank of torchrun."""
    # local: loads confluent-kafka, numpy, prometheus-client, torch, needed only on this path
    from trainer.rl import distributed
    from trainer.rl.config import TrainConfig
    from trainer.rl.launch import launch, run_rank, summary_line, under_torchrun
    from trainer.rl.streaming_ppo import train

    settings = command_settings(args)
    cfg = config_of(TrainConfig, vars(args))
    if cfg.nproc_per_node > 1:
        return launch(cfg, settings, verbose=getattr(args, "verbose", False))
    stop = stop_on_signals(log, "finishing the current step, then closing cleanly")
    if not under_torchrun():
        print(summary_line(train(cfg, settings, stop)))
        return 0
    summary = run_rank(cfg, settings, stop)
    if summary is not None:  # torchrun's other ranks have none
        print(summary_line(summary))
    distributed.exit_rank(0)


def cmd_bc(args: argparse.Namespace) -> int:
    # local: loads confluent-kafka, numpy, torch, needed only on this path
    from trainer.sft.bc import run_bc
    from trainer.sft.bc_config import BCConfig

    settings = command_settings(args)
    out = run_bc(config_of(BCConfig, vars(args)), settings)
    match = f", greedy = demonstrator on {out['train_match']['all']:.0%} of them" if out["train_match"] else ""
    noise = out["skipped"].get("noise_steps", 0)
    noise = f" (and {noise} noise steps, history only)" if noise else ""
    print(f"published pi_sft as version {out['version']}: {out['steps']} steps{noise} of {sum(out['demos'].values())} "
          f"demonstrations {out['demos']}, loss {out['loss']:.3f}{match}, {out['seconds']:.0f}s")
    if out["missing"]:
        print(f"no demonstration of {', '.join(out['missing'])}: those tasks start from what the policy knows")
    return 0


CONFIG_HELP = ("a JSON file of this command's settings, field name -> value (a run's resolved configuration, as "
               "`flywheel demo` writes it in the run's folder); the options given here override it, and it "
               "overrides FLYWHEEL_* variables")


def config_of(cls: type, args: Mapping[str, Any], env: Mapping[str, str] | None = None) -> Any:
    """The ``cls`` a parsed command line runs with, validated: its options > its ``--config`` file
    (``file_values``) > FLYWHEEL_* variables (``env``: this process's by default) > defaults.
    ConfigError before anything starts for an unknown field or a bad value."""
    file = file_values(cls, args["config"]) if args.get("config") else None
    return resolve(cls, args, env, file=file).validate()


def register(sub) -> None:
    # local: loads numpy, needed only on this path
    from trainer.sft.bc_config import BCConfig
    from trainer.rl.config import TrainConfig

    for parser in (
        add_command(sub, "train", "streaming PPO trainer: flywheel.rl.v1 -> policy versions", cmd_train, TrainConfig),
        add_command(sub, "bc", "behaviour cloning (pixel or language policy): flywheel.sft.v1 -> pi_sft, a policy "
                    "version", cmd_bc, BCConfig),
    ):
        parser.add_argument("--config", metavar="PATH", default=None, help=CONFIG_HELP)
    serving_cli.register(sub)
