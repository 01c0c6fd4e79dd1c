"""The processes of a `flywheel demo` run and what each is started with: the platform's (sink,
stream processors, the UI) and the learner's (the trainer, handed its whole resolved
configuration as one file, and the rollout workers), all in the environment ``child_env`` builds
from the run's settings; ``check_child_options`` asks `flywheel train` and `flywheel bc` whether
they accept what the run will give them before anything starts."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, NamedTuple

import app.ui.cli as ui_cli
from app import phases, run_config
from app.demo_config import DemoConfig, expert_labels
from infra.runtime.command import check_argv
from infra.runtime.config import ConfigError, to_env
from infra.runtime.errors import UserError
from infra.runtime.procs import Child, flywheel_argv
from infra.runtime.settings import Settings
from producers.capacity import machine_sandboxes
from producers.suites import RunPlan
from streams import cli as streams_cli
from streams.config import StreamsConfig
from streams.score import check_judge, parse_judge_tasks

def child_env(settings: Settings, prefix: str) -> dict[str, str]:
    """Children rebuild the platform settings from FLYWHEEL_* variables: every setting is passed,
    credentials given as options included, with the run's topic prefix."""
    env = {
        **to_env(settings),
        "FLYWHEEL_DATA_DIR": str(settings.data_path),
        "FLYWHEEL_KAFKA_BOOTSTRAP": settings.bootstrap,
        "FLYWHEEL_TOPIC_PREFIX": prefix,
        "PYTHONUNBUFFERED": "1",
        # one torch/OpenMP thread per process: with every child sharing the cores, two spinning
        # threads made a PPO update 3-5x slower and act() ~10x slower than one
        "OMP_NUM_THREADS": "1",
    }
    return env


def plan_children(cfg: DemoConfig, settings: Settings, prefix: str, policy: str, logs: Path,
                  plan: RunPlan, trainer: run_config.Resolved | None = None) -> list[Child]:
    """The processes of the loop, in start order (stop order is the reverse): the platform (sink,
    stream processors), then the learner (trainer, rollout workers). ``trainer``: the trainer's
    resolved configuration (``check_child_options``'; resolved here when not given), handed to it
    as one file in the run's folder (``TRAINER_FILE``, beside ``logs``)."""
    env = child_env(settings, prefix)
    trainer = trainer or trainer_config(cfg, prefix, policy, plan, {**os.environ, **env})
    sync_batch = str(cfg.batch_episodes) if cfg.sync else "0"
    children = [
        Child("sink", flywheel_argv("sink", "--group-id", f"{prefix}sink", "--query-port", "0"),
              logs / "sink.log", env),
        Child("streams", flywheel_argv("streams", "--app-id", f"{prefix}streams", *cfg.streams_args.split()),
              logs / "streams.log", env),
        Child("trainer", flywheel_argv("train", *trainer.write(logs.parent / TRAINER_FILE)), logs / "trainer.log", env),
    ]
    for i in range(cfg.workers):
        children.append(Child(f"rollout-{i}", flywheel_argv(
            "rollout", "--sandboxes", str(cfg.sandboxes or machine_sandboxes(cfg.workers)), "--policy-backend", "torch",
            "--policy-kind", cfg.policy_kind, "--policy-name", policy, "--worker-id", f"worker-{i}",
            "--group-id", f"{prefix}rollout", *(["--sync-episodes", sync_batch] if cfg.sync else []),
            *(["--expert-labels"] if expert_labels(cfg) else []), *cfg.rollout_args.split(),
        ), logs / f"rollout-{i}.log", env))
    return children


def trainer_config(cfg: DemoConfig, prefix: str, policy: str, plan: RunPlan,
                   env: dict[str, str] | None = None) -> run_config.Resolved:
    """`flywheel train`'s whole configuration in the run (``app.run_config``: the kind's, the
    suite's, the demo's, then --trainer-args; ``env``: the child's, this process's by default)."""
    return run_config.resolve_trainer(cfg, prefix, policy, plan, phases.kind_config(cfg, plan.action_types),
                                      dict(os.environ) if env is None else env)


TRAINER_FILE = "trainer.json"  # in the run's folder: `flywheel train --config`'s, the trainer's whole configuration


def ui_child(port: int, token: str, logs: Path, env: dict[str, str]) -> Child:
    """`flywheel ui` for the run. The token travels in its environment (``FLYWHEEL_UI_TOKEN``, which
    only its owner can read), never in its arguments, which any local user sees with `ps` and the
    demo's log repeats. It reads through the run's sink only (``--through-sink``): started first,
    it must not hold the chDB data directory the sink is about to lock."""
    return Child("ui", flywheel_argv("ui", "--port", str(port), "--through-sink"), logs / "ui.log",
                 {**env, ui_cli.TOKEN_ENV: token})


class Checked(NamedTuple):
    """What ``check_child_options`` resolved, handed on so that nothing is resolved twice."""
    trainer: run_config.Resolved  # the trainer's resolved configuration (``trainer_config``)
    judged: str  # the tasks the streams' judge decides (``judged_tasks``)


def check_child_options(cfg: DemoConfig, cold: phases.ColdStart, names: tuple[str, str, str],
                        settings: Settings) -> Checked:
    """The trainer's resolved configuration in this run and the tasks its judge decides, or UserError unless
    `flywheel train`, `flywheel streams` (``judged_tasks``) and, with a cold start, `flywheel bc` accept what the run will give them
    (``phases.bc_options``: the demo's settings, then --bc-args), parsed by their own parser,
    platform settings included. A misspelt option, a bad value, or RFT rounds with
    --nproc-per-node 2 failed the run only when its phase began, minutes in. Checked before
    anything starts, in the environment they will have (``child_env``: the run's ``settings`` as
    FLYWHEEL_* variables over this process's)."""
    _, prefix, policy = names
    plan = cfg.plan()
    env = {**os.environ, **child_env(settings, prefix)}
    trainer = trainer_config(cfg, prefix, policy, plan, env)
    check_labels(cfg, trainer.train, type(trainer.train)())
    judged = judged_tasks(cfg, env)
    if cfg.cold_start_demos:
        try:
            run_config.bc_config(phases.bc_options(cfg, policy, list(cold.demonstrated), plan.action_types), env)
        except (ConfigError, UserError) as exc:
            raise UserError(f"flywheel bc would refuse its options in this run (the demo's, then --bc-args "
                            f"{cfg.bc_args!r}; FLYWHEEL_* variables count too): {exc}") from None
    return Checked(trainer, judged)


def judged_tasks(cfg: DemoConfig, env: dict[str, str]) -> str:
    """The tasks whose reward the streams' judge decides in this run, as `flywheel streams` will
    resolve them (its own parser over ``--streams-args``, FLYWHEEL_* variables in ``env`` too):
    "" (the page's verdict everywhere), "*" (every task) or the names, sorted. UserError where the
    streams would refuse their options, or judge tasks without a judge."""
    try:
        streams = check_argv(streams_cli.register, "streams", cfg.streams_args.split(), StreamsConfig, env)
    except (ConfigError, UserError) as exc:
        raise UserError(f"flywheel streams would refuse its options in this run (--streams-args "
                        f"{cfg.streams_args!r}; FLYWHEEL_* variables count too): {exc}") from None
    tasks = parse_judge_tasks(streams.judge_tasks)
    try:
        check_judge(tasks, bool(streams.judge_url), streams.judge_success_at)
    except UserError as exc:
        raise UserError(f"the streams' options (--streams-args, FLYWHEEL_* variables): {exc}") from None
    return "*" if "*" in tasks else ",".join(sorted(tasks))


def check_labels(cfg: DemoConfig, train: Any, default: Any) -> None:
    """UserError where the trainer would run DAgger otherwise than the demo set it (--trainer-args,
    abbreviated or not, or a FLYWHEEL_* variable): the demo also tells the rollout workers whether
    to record the solver's labels, and its header says what it set."""
    meant = {"expert_coef": cfg.expert_coef if cfg.expert_coef > 0 else default.expert_coef,
             "dagger_every": cfg.dagger_every if cfg.dagger_every > 0 else default.dagger_every}
    changed = [f"--{k.replace('_', '-')}" for k, v in meant.items() if getattr(train, k) != v]
    if changed:
        raise UserError(f"give {' and '.join(changed)} to the demo itself, not in --trainer-args or a FLYWHEEL_* "
                        "variable: the demo also tells the rollout workers whether to record the solver's labels")
