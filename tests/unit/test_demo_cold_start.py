"""Tasks without a demonstrator, decided before the demo starts anything: the cold start over
the tasks that have one, PPO alone on the others, random weights when none has one, a refusal
when demonstrations of every task were asked for; value pretraining only after a cold start."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app import phases
from app.demo_config import DemoConfig, effective
from app.demo_report import resolved
from infra.runtime.errors import UserError

SOLVED = frozenset({"click-test", "enter-text"})


def test_auto_clones_the_demonstrated_tasks_and_names_the_others():
    cold = phases.cold_start_plan(["click-test", "click-link", "enter-text", "click-dialog"], -1, SOLVED)
    assert cold.per_task == phases.DEMOS_PER_TASK
    assert cold.demonstrated == ("click-test", "enter-text") and cold.rl_only == ("click-link", "click-dialog")
    said = " ".join(cold.lines)
    assert "click-link, click-dialog" in said and "never" in said


def test_auto_with_every_task_demonstrated_says_nothing_about_missing_ones():
    cold = phases.cold_start_plan(["click-test", "enter-text"], -1, SOLVED)
    assert (cold.per_task, cold.rl_only) == (phases.DEMOS_PER_TASK, ())
    assert len(cold.lines) == 1 and "no demonstrator" not in cold.lines[0]


def test_auto_with_no_demonstrator_starts_from_random_weights():
    cold = phases.cold_start_plan(["click-link", "click-dialog"], -1, SOLVED)
    assert (cold.per_task, cold.demonstrated, cold.rl_only) == (0, (), ("click-link", "click-dialog"))
    assert "random weights" in cold.lines[0] and "click-link, click-dialog" in cold.lines[0]


def test_demonstrations_asked_of_a_task_without_a_demonstrator_are_refused_with_the_choices():
    with pytest.raises(UserError) as err:
        phases.cold_start_plan(["click-test", "click-link"], 5, SOLVED)
    text = str(err.value)
    assert "click-link" in text and "--cold-start-demos -1" in text and "--cold-start-demos 0" in text
    asked = phases.cold_start_plan(["click-test"], 5, SOLVED)
    assert (asked.per_task, asked.demonstrated) == (5, ("click-test",))


def test_zero_starts_every_task_from_random_weights():
    cold = phases.cold_start_plan(["click-test", "click-link"], 0, SOLVED)
    assert (cold.per_task, cold.demonstrated, cold.rl_only) == (0, (), ("click-test", "click-link"))
    assert "no demonstrator for click-link" in cold.lines[0]


def test_from_random_weights_value_pretraining_is_off_unless_asked():
    cfg, cold, _ = effective(DemoConfig(tasks=["click-link"]), SOLVED)
    assert (cfg.cold_start_demos, cfg.value_pretrain_batches, cold.rl_only) == (0, 0, ("click-link",))
    cfg, _, _ = effective(DemoConfig(tasks=["click-test"], cold_start_demos=0), SOLVED)
    assert cfg.value_pretrain_batches == 0
    cfg, _, _ = effective(DemoConfig(tasks=["click-link"], value_pretrain_batches=3), SOLVED)
    assert cfg.value_pretrain_batches == 3  # asked for: bounded by what was asked
    cfg, _, _ = effective(DemoConfig(tasks=["click-test"]), SOLVED)
    assert (cfg.cold_start_demos, cfg.value_pretrain_batches) == (phases.DEMOS_PER_TASK, 20)


def test_the_run_from_random_weights_takes_the_trainers_defaults():
    from trainer.rl.config import TrainConfig

    cfg, _, _ = effective(DemoConfig(tasks=["click-link"]), SOLVED)
    got = resolved(cfg)  # what the trainer runs with
    assert got["ppo_lr"] == TrainConfig().lr and got["rft_every"] == 0  # the trainer's own learning rate
    assert got["target_kl"] == 0.02  # bounded updates: from random weights tasks collapsed without
    cfg, _, _ = effective(DemoConfig(tasks=["click-test"]), SOLVED)
    assert resolved(cfg)["target_kl"] == 0.0  # after a cold start: every epoch
    assert resolved(DemoConfig(policy_kind="lm", cold_start_demos=0))["target_kl"] == 0.0
    assert resolved(DemoConfig(target_kl=0.05))["target_kl"] == 0.05
    with pytest.raises(UserError):  # DPO needs pi_sft as its reference
        effective(DemoConfig(tasks=["click-link"], minutes=10, dpo_minutes=2), SOLVED)


def test_the_scripted_solvers_are_the_demonstrators():
    from producers.suites import get_suite

    assert set(get_suite("default").tasks) <= phases.demonstrators()
    assert "click-link" not in phases.demonstrators()


def test_the_trainer_of_a_run_from_random_weights_is_told_its_target_kl(tmp_path):
    from app.demo_children import plan_children
    from infra.runtime.settings import load_settings
    from producers.suites import plan as suite_plan

    settings = load_settings({"data_dir": str(tmp_path), "kafka_bootstrap": "127.0.0.1:1"}, env={})

    def trainer_file(cfg: DemoConfig) -> dict:
        """The configuration file the trainer is handed (``--config PATH``)."""
        cfg, _, _ = effective(cfg, SOLVED)
        kids = plan_children(cfg, settings, "demo-x.", "pixel-x", tmp_path / "logs",
                             suite_plan(cfg.tasks, cfg.max_steps))
        argv = next(c.argv for c in kids if c.name == "trainer")
        return json.loads(Path(argv[argv.index("--config") + 1]).read_text())

    assert trainer_file(DemoConfig(tasks=["click-link"]))["target_kl"] == 0.02  # no demonstrator: random weights
    assert trainer_file(DemoConfig(tasks=["click-test"]))["target_kl"] == 0  # cloned pi_sft first: every epoch runs


def test_the_report_names_what_the_automatic_settings_came_to():
    from trainer.rl.config import TrainConfig

    scratch, _, _ = effective(DemoConfig(tasks=["click-link"], sandboxes=3), SOLVED)  # no demonstrator
    lr = TrainConfig().lr  # the trainer's own default, named as the number it is
    assert resolved(scratch) == {"ppo_lr": lr, "rft_every": 0, "target_kl": 0.02, "explore": 0.5,
                                 "sandboxes_per_worker": 3}
    cloned, _, _ = effective(DemoConfig(tasks=["click-test"], target_kl=0.05), SOLVED)
    got = resolved(cloned)
    assert (got["ppo_lr"], got["rft_every"], got["target_kl"], got["explore"]) == (3e-4, 8, 0.05, 0.0) and got["sandboxes_per_worker"] >= 1


def test_each_kind_says_its_automatic_ppo_settings_in_one_record_and_the_user_overrides_them():
    lm = DemoConfig(policy_kind="lm", minutes=20)  # auto cold start counts as one
    assert (resolved(lm)["ppo_lr"], resolved(lm)["rft_every"], lm.dpo_span_s()) == (1e-6, 0, 20 * 60 * 0.25)
    scratch = DemoConfig(policy_kind="lm", cold_start_demos=0, minutes=20)
    assert scratch.dpo_span_s() == 0.0  # DPO needs pi_sft as its reference
    pixel = DemoConfig(minutes=20, ppo_lr=1e-3, rft_every=2, dpo_minutes=3)
    assert (resolved(pixel)["ppo_lr"], resolved(pixel)["rft_every"], pixel.dpo_span_s()) == (1e-3, 2, 180.0)
    assert DemoConfig(minutes=20).dpo_span_s() == 0.0  # the pixel policy has no DPO phase by default


def test_the_games_demonstrations_make_the_suites_mistakes_unless_told_otherwise():
    from producers.suites import get_suite

    games = frozenset(get_suite("games").tasks)
    cfg, _, _ = effective(DemoConfig(tasks=["games"]), games)
    assert cfg.demo_noise == get_suite("games").demo_noise > 0
    cfg, _, _ = effective(DemoConfig(tasks=["games.snake"], demo_noise=0.3), games)
    assert cfg.demo_noise == 0.3  # asked for
    cfg, _, _ = effective(DemoConfig(tasks=["games"], demo_noise=0.0), games)
    assert cfg.demo_noise == 0.0  # off
    cfg, _, _ = effective(DemoConfig(tasks=["games"], cold_start_demos=0), games)
    assert cfg.demo_noise == 0.0  # nothing to perturb
    cfg, _, _ = effective(DemoConfig(tasks=["click-test"]), SOLVED)
    assert cfg.demo_noise == 0.0  # MiniWoB++'s demonstrations stay clean
    cfg, _, _ = effective(DemoConfig(tasks=["click-test", "games.snake"]), SOLVED | games)
    assert cfg.demo_noise == 0.0  # a run mixing suites: no suite holds every task
    with pytest.raises(UserError, match="needs --demos-from scripted"):
        effective(DemoConfig(tasks=["games"], cold_start_demos=0, demo_noise=0.2), games)


def test_the_multistep_suite_resolves_to_a_clicks_only_run_from_random_weights():
    from producers.suites import get_suite, plan

    suite = get_suite("multistep")
    cfg, cold, _ = effective(DemoConfig(tasks=["multistep"]), phases.demonstrators())
    assert (cfg.cold_start_demos, cfg.value_pretrain_batches) == (0, 0)
    assert (cold.demonstrated, cold.rl_only) == ((), suite.tasks) and "random weights" in cold.lines[0]
    run = plan(cfg.tasks, cfg.max_steps)
    assert (run.tasks, run.action_types, run.max_steps) == (suite.tasks, ("click",), suite.max_steps)
