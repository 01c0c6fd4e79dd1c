"""One resolved configuration per run (app.run_config): the trainer's settings decided once, with
the precedence defaults < FLYWHEEL_* < kind < suite < the run's (the user's demo options) <
--trainer-args, and handed to the trainer as one file (`flywheel train --config`) from which its own
parser rebuilds the same config."""

from __future__ import annotations

import argparse
import dataclasses
import json

import pytest

from app import run_config
from app.demo_children import check_child_options, trainer_config
from app.demo_config import DemoConfig, effective
from app.demo_report import resolved
from infra.runtime.command import parse_command
from infra.runtime.config import ConfigError
from infra.runtime.errors import UserError
from infra.runtime.settings import load_settings
from producers.suites import get_suite, plan
from trainer import cli as trainer_cli
from trainer.rl.config import TrainConfig

GAMES = frozenset(get_suite("games").tasks)


def trainer_of(env: dict[str, str] | None = None, **demo) -> run_config.Resolved:
    cfg, _, _ = effective(DemoConfig(**demo), GAMES)
    return trainer_config(cfg, "demo-x.", "pixel-x", cfg.plan(), {} if env is None else env)


def as_the_trainer_parses_it(resolved: run_config.Resolved, env: dict[str, str], folder) -> TrainConfig:
    """What `flywheel train <argv>` runs with in the child's environment (its own parser), handed
    the run's resolved configuration as the demo hands it (a file in the run's folder)."""
    args = parse_command(trainer_cli.register, "train", resolved.write(folder / "trainer.json"))
    load_settings(args, env=env)
    return trainer_cli.config_of(TrainConfig, args, env)


def test_the_users_target_kl_beats_the_games_suites_in_the_trainer_and_the_report(tmp_path):
    # `flywheel demo --tasks games --target-kl 0.05` trained at the suite's 0.02 while the report said 0.05:
    # the suite's options came after the demo's in the trainer's argv, and the last one won
    asked = trainer_of(tasks=["games"], target_kl=0.05)
    assert asked.train.target_kl == 0.05 and asked.origins["target_kl"] == "run"
    assert as_the_trainer_parses_it(asked, {}, tmp_path).target_kl == 0.05
    assert resolved(DemoConfig(tasks=["games"], target_kl=0.05), asked.train)["target_kl"] == 0.05
    assert asked.train.minibatch_size == 256 and asked.origins["minibatch_size"] == "suite"  # the suite's others stay
    auto = trainer_of(tasks=["games"])  # left on auto: the suite's, above the kind's (off after a cold start)
    assert auto.train.target_kl == 0.02 and auto.origins["target_kl"] == "suite"
    assert resolved(effective(DemoConfig(tasks=["games"]), GAMES)[0])["target_kl"] == 0.02  # the report said 0
    off = trainer_of(tasks=["games"], target_kl=0.0)  # off is a value too, not "not given"
    assert off.train.target_kl == 0.0 and as_the_trainer_parses_it(off, {}, tmp_path).target_kl == 0.0


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


def test_the_trainer_rebuilds_the_resolved_config_whole_in_its_environment(tmp_path):
    env = {"FLYWHEEL_TARGET_KL": "0.3", "FLYWHEEL_EPOCHS": "7", "FLYWHEEL_LAM_POLICY": "0.9"}
    for demo in (dict(tasks=["games"], target_kl=0.0), dict(tasks=["click-test"], sync=True),
                 dict(tasks=["games"], trainer_args="--lam-policy -1 --metrics-port 9999"),
                 dict(tasks=["click-link"], policy_config='{"ground": false}', rft_every=2)):
        got = trainer_of(env, **demo)
        assert as_the_trainer_parses_it(got, env, tmp_path) == got.train, demo
        # the file holds every field: a variable that differs in the child changes nothing
        assert as_the_trainer_parses_it(got, {**env, "FLYWHEEL_EPOCHS": "9", "FLYWHEEL_SEED": "5"}, tmp_path) == got.train
    record = trainer_of(env, tasks=["games"]).record()
    assert record["trainer"]["epochs"] == 4 and record["trainer_origins"]["epochs"] == "suite"
    assert "defaults" not in record["trainer_origins"].values() and "<" in record["precedence"]


def test_settings_the_trainer_would_refuse_are_refused_before_anything_starts():
    with pytest.raises(UserError, match="unrecognized arguments: --lam-polcy"):
        trainer_of(tasks=["games"], trainer_args="--lam-polcy 0.9")
    with pytest.raises(UserError, match="epochs"):
        trainer_of({"FLYWHEEL_EPOCHS": "0"}, tasks=["click-test"])


def test_the_trainer_takes_the_runs_file_whole_and_a_persons_options_over_it(tmp_path):
    got = trainer_of(tasks=["games"], target_kl=0.05)
    argv = got.write(tmp_path / "trainer.json")
    assert argv == ["--config", str(tmp_path / "trainer.json")]  # no option list: the file is the configuration
    assert set(json.loads((tmp_path / "trainer.json").read_text())) == set(TrainConfig.__dataclass_fields__)
    by_hand = parse_command(trainer_cli.register, "train", [*argv, "--epochs", "3", "--target-kl", "0.1"])
    cfg = trainer_cli.config_of(TrainConfig, by_hand, {"FLYWHEEL_EPOCHS": "9"})
    assert (cfg.epochs, cfg.target_kl, cfg.minibatch_size) == (3, 0.1, got.train.minibatch_size)  # options win
    partial = tmp_path / "partial.json"
    partial.write_text('{"epochs": 5, "lr": 1}')  # a person's file may hold some fields; an int is a float too
    cfg = trainer_cli.config_of(TrainConfig, parse_command(trainer_cli.register, "train", ["--config", str(partial)]),
                                {"FLYWHEEL_EPOCHS": "9", "FLYWHEEL_CHUNK_STEPS": "64"})
    assert (cfg.epochs, cfg.lr, cfg.chunk_steps, cfg.min_batch) == (5, 1.0, 64, TrainConfig().min_batch)


@pytest.mark.parametrize("text, message", [
    ('{"epoch": 4}', "no setting 'epoch' .did you mean 'epochs'"),  # unknown: misspelt
    ('{"epochs": "4"}', "epochs must be int, got '4'"),
    ('{"epochs": 1.5}', "epochs must be int, got 1.5"),
    ('{"norm_adv": 1}', "norm_adv must be bool, got 1"),
    ('{"epochs": true}', "epochs must be int, got True"),
    ('{"lr": null}', "lr must be float, got None"),
    ('{"epochs": 0}', "min_batch, epochs and minibatch_size must be >= 1"),  # the trainer's own validation
    ('{"device": "tpu"}', "device must be cpu, cuda or cuda:N"),
    ('[1, 2]', "must hold one JSON object"),
    ('{"epochs": 4', "is not JSON"),
])
def test_a_config_file_with_an_unknown_field_or_a_bad_value_is_refused_before_anything_starts(
        tmp_path, monkeypatch, text, message):
    # local: loads torch, needed only on this path
    from trainer.rl import streaming_ppo

    path = tmp_path / "trainer.json"
    path.write_text(text)
    started = []
    monkeypatch.setattr(streaming_ppo, "train", lambda *a, **k: started.append(a))
    args = parse_command(trainer_cli.register, "train", ["--config", str(path), "--data-dir", str(tmp_path)])
    with pytest.raises(ConfigError, match=message):
        args["func"](argparse.Namespace(**args))
    assert not started


def test_the_run_refuses_a_config_file_in_its_trainers_options():
    with pytest.raises(UserError, match="hands `flywheel train` its resolved configuration as a file itself"):
        trainer_of(tasks=["games"], trainer_args="--config x.json")


def test_the_cloning_rebuilds_its_configuration_from_the_file_the_cold_start_hands_it(tmp_path):
    from app import phases
    from trainer.sft.bc_config import BCConfig

    cfg, cold, _ = effective(DemoConfig(tasks=["games"], cold_start_demos=3, bc_args="--epochs 12 --metrics-port 9998"),
                             GAMES)
    options = phases.bc_options(cfg, "pixel-x", list(cold.demonstrated), ("click", "hotkey"))
    env = {"FLYWHEEL_SEED": "5"}
    argv = run_config.bc_handed(options, env, tmp_path / "bc.json", epochs=4)  # SFT's share cut the epochs
    assert argv == ["--config", str(tmp_path / "bc.json"), "--metrics-port", "9998"]  # the user's platform setting
    args = parse_command(trainer_cli.register, "bc", argv)
    assert load_settings(args, env={}).metrics_port == 9998
    got = trainer_cli.config_of(BCConfig, args, {"FLYWHEEL_SEED": "7", "FLYWHEEL_LR": "0.5"})
    assert got == dataclasses.replace(run_config.bc_config(options, env), epochs=4)
    assert (got.epochs, got.demos_per_task, got.lr, got.seed) == (4, 3, 1e-3, 0)  # the suite's rate, the demo's seed
    with pytest.raises(UserError, match="hands `flywheel bc` its resolved configuration as a file itself"):
        check_child_options(*effective(DemoConfig(tasks=["games"], cold_start_demos=3, bc_args="--config x.json"),
                                       GAMES)[:2], ("x", "demo-x.", "pixel-x"), load_settings({}, env={}))
    (tmp_path / "bad.json").write_text('{"demos_per_task": 4, "epoch": 3}')
    with pytest.raises(ConfigError, match="no setting 'epoch' .did you mean 'epochs'"):
        trainer_cli.config_of(BCConfig, parse_command(trainer_cli.register, "bc", ["--config", str(tmp_path / "bad.json")]))


def test_actions_choose_the_heads_of_tasks_in_no_suite_and_unknown_ones_are_refused(tmp_path):
    homeless = ["click-dialog", "count-shape"]  # in no suite: the default suite's heads
    assert plan(homeless).action_types == ("click", "type", "scroll", "press_enter", "finished")
    cfg = DemoConfig(tasks=homeless, actions=["click"], cold_start_demos=0)
    assert cfg.plan().action_types == ("click",) and cfg.plan().tasks == tuple(homeless)
    # the policy the trainer builds has the click head alone, so the workers play clicks only
    config = json.loads(trainer_of(tasks=homeless, actions=["click"], cold_start_demos=0).train.policy_config)
    assert config["action_types"] == ["click"]
    assert plan(["games"], actions=["hotkey", "click"]).action_types == ("click", "hotkey")  # the heads' own order
    for bad in (["tap"], ["click", "shell"]):
        with pytest.raises(UserError, match="--actions .*the policy has heads for click"):
            effective(DemoConfig(tasks=homeless, actions=bad, cold_start_demos=0), GAMES)
    # a suite's tasks keep its heads: the games without their arrows could not be played
    with pytest.raises(UserError, match="leaves out hotkey"):
        DemoConfig(tasks=["games"], actions=["click"]).plan()
    with pytest.raises(UserError, match="leaves out type, scroll, press_enter, finished"):
        DemoConfig(tasks=["default", "click-dialog"], actions=["click"]).plan()
    assert plan(["starter", "click-dialog"], actions=["click", "type"]).action_types == ("click", "type")  # may widen
    # given once, to a policy that has heads
    with pytest.raises(UserError, match="give the action types once"):
        DemoConfig(tasks=homeless, actions=["click"], policy_config='{"action_types": ["click"]}').validate()
    with pytest.raises(UserError, match="the lm policy has none"):
        DemoConfig(tasks=homeless, actions=["click"], policy_kind="lm").validate()


def test_the_default_suites_rft_rounds_are_every_8_updates_one_pass_and_a_persons_options_beat_them():
    demonstrable = frozenset(get_suite("default").tasks)  # the cold start clones them: RFT on auto

    def of(**demo) -> run_config.Resolved:
        cfg, _, _ = effective(DemoConfig(tasks=["default"], **demo), demonstrable)
        return trainer_config(cfg, "demo-x.", "pixel-x", cfg.plan(), {})

    auto = of()
    assert (auto.train.rft_every, auto.train.rft_epochs) == (8, 1)
    assert auto.origins["rft_every"] == auto.origins["rft_epochs"] == "kind"
    asked = of(rft_every=4)  # a round is one pass however often it runs
    assert (asked.train.rft_every, asked.train.rft_epochs, asked.origins["rft_every"]) == (4, 1, "run")
    mine = of(rft_every=4, trainer_args="--rft-epochs 2")
    assert (mine.train.rft_every, mine.train.rft_epochs, mine.origins["rft_epochs"]) == (4, 2, "trainer_args")
    assert trainer_of(tasks=["games"]).train.rft_every == 0  # no RFT on the games' teacher-free recipe


def test_after_a_cold_start_ppo_runs_4_epochs_a_batch_and_a_suites_or_a_persons_setting_beats_it():
    demonstrable = frozenset(get_suite("default").tasks)

    def of(**demo) -> run_config.Resolved:
        cfg, _, _ = effective(DemoConfig(**demo), demonstrable)
        return trainer_config(cfg, "demo-x.", "pixel-x", cfg.plan(), {})

    auto = of(tasks=["default"])
    assert (auto.train.epochs, auto.origins["epochs"]) == (4, "kind")
    mine = of(tasks=["default"], trainer_args="--epochs 8")
    assert (mine.train.epochs, mine.origins["epochs"]) == (8, "trainer_args")
    cold = of(tasks=["default"], cold_start_demos=0)  # from random weights: the trainer's default
    assert cold.train.epochs == TrainConfig().epochs == 8 and cold.origins["epochs"] != "kind"
    assert trainer_of(tasks=["games"]).train.epochs == 4  # the games' suite sets its own


def test_a_report_folder_inside_the_checkout_is_recorded_relative_to_it(tmp_path):
    from app.demo_report import in_checkout

    root = tmp_path / "checkout"
    (root / "var" / "r").mkdir(parents=True)
    assert in_checkout(str(root / "var" / "r"), root) == "var/r"
    assert in_checkout(str(root / "var" / ".." / "var" / "r"), root) == "var/r"
    assert in_checkout(str(tmp_path / "elsewhere"), root) == str(tmp_path / "elsewhere")  # outside: as given
    assert in_checkout("", root) == ""  # none asked: the demo's own folder
