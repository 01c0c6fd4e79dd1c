"""One resolved configuration per run (app.run_config): the trainer's settings decided once, with
the precedence defaults < FLYWHEEL_* < kind < suite < the run's (the user's demo options) <
--trainer-args, and handed to the trainer so that its own parser rebuilds the same config."""

from __future__ import annotations

import pytest

from app import run_config
from app.demo import DemoConfig, effective, resolved, trainer_config
from infra.runtime.command import check_argv
from infra.runtime.errors import UserError
from producers.suites import get_suite, plan
from trainer import cli as trainer_cli
from trainer.rl.config import TrainConfig

GAMES = frozenset(get_suite("games").tasks)


def trainer_of(env: dict[str, str] | None = None, **demo) -> run_config.Resolved:
    cfg, _, _ = effective(DemoConfig(**demo), GAMES)
    return trainer_config(cfg, "demo-x.", "pixel-x", plan(cfg.tasks, cfg.max_steps), {} if env is None else env)


def as_the_trainer_parses_it(resolved: run_config.Resolved, env: dict[str, str]) -> TrainConfig:
    """What `flywheel train <argv>` runs with in the child's environment (its own parser)."""
    return check_argv(trainer_cli.register, "train", resolved.argv(), TrainConfig, env)


def test_the_users_target_kl_beats_the_games_suites_in_the_trainer_and_the_report():
    # `flywheel demo --tasks games --target-kl 0.05` trained at the suite's 0.02 while the report said 0.05:
    # the suite's options came after the demo's in the trainer's argv, and the last one won
    asked = trainer_of(tasks=["games"], target_kl=0.05)
    assert asked.train.target_kl == 0.05 and asked.origins["target_kl"] == "run"
    assert as_the_trainer_parses_it(asked, {}).target_kl == 0.05
    assert resolved(DemoConfig(tasks=["games"], target_kl=0.05), asked.train)["target_kl"] == 0.05
    assert asked.train.minibatch_size == 256 and asked.origins["minibatch_size"] == "suite"  # the suite's others stay
    auto = trainer_of(tasks=["games"])  # left on auto: the suite's, above the kind's (off after a cold start)
    assert auto.train.target_kl == 0.02 and auto.origins["target_kl"] == "suite"
    assert resolved(effective(DemoConfig(tasks=["games"]), GAMES)[0])["target_kl"] == 0.02  # the report said 0
    off = trainer_of(tasks=["games"], target_kl=0.0)  # off is a value too, not "not given"
    assert off.train.target_kl == 0.0 and as_the_trainer_parses_it(off, {}).target_kl == 0.0


def test_each_layer_beats_the_one_before_it():
    env = {"FLYWHEEL_EPOCHS": "7", "FLYWHEEL_CHUNK_STEPS": "64"}
    default = trainer_of(env, tasks=["click-test"])  # no suite setting: the environment beats the defaults
    assert (default.train.epochs, default.origins["epochs"]) == (7, "environment")
    games = trainer_of(env, tasks=["games"])  # the suite's 4 epochs beat the environment
    assert (games.train.epochs, games.origins["epochs"], games.train.chunk_steps) == (4, "suite", 64)
    users = trainer_of(env, tasks=["games"], trainer_args="--epochs 3 --target-kl 0.1", target_kl=0.05)
    assert (users.train.epochs, users.train.target_kl) == (3, 0.1)  # --trainer-args last
    assert users.origins["target_kl"] == "trainer_args"
    lm = trainer_of({}, tasks=["click-test"], policy_kind="lm", dpo_minutes=0)  # the kind's own options
    assert (lm.train.epochs, lm.train.minibatch_size, lm.train.lr) == (2, 8, 1e-6)
    assert lm.origins["epochs"] == "kind" and run_config.PRECEDENCE[0] == "defaults"


def test_the_trainer_rebuilds_the_resolved_config_whole_in_its_environment():
    env = {"FLYWHEEL_TARGET_KL": "0.3", "FLYWHEEL_EPOCHS": "7", "FLYWHEEL_LAM_POLICY": "0.9"}
    for demo in (dict(tasks=["games"], target_kl=0.0), dict(tasks=["click-test"], sync=True),
                 dict(tasks=["games"], trainer_args="--lam-policy -1 --metrics-port 9999"),
                 dict(tasks=["click-link"], policy_config='{"ground": false}', rft_every=2)):
        got = trainer_of(env, **demo)
        assert as_the_trainer_parses_it(got, env) == got.train, demo
    record = trainer_of(env, tasks=["games"]).record()
    assert record["trainer"]["epochs"] == 4 and record["trainer_origins"]["epochs"] == "suite"
    assert "defaults" not in record["trainer_origins"].values() and "<" in record["precedence"]


def test_settings_the_trainer_would_refuse_are_refused_before_anything_starts():
    with pytest.raises(UserError, match="unrecognized arguments: --lam-polcy"):
        trainer_of(tasks=["games"], trainer_args="--lam-polcy 0.9")
    with pytest.raises(UserError, match="epochs"):
        trainer_of({"FLYWHEEL_EPOCHS": "0"}, tasks=["click-test"])
