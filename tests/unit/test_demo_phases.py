"""The demo's phases: which phase a run is in, their wall-clock, the per-phase table and the
value-pretraining summary the report prints."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app import measures, phases
from app.demo_config import DemoConfig
from infra.runtime.errors import UserError
from trainer.core import metric_names as M


def test_the_phase_follows_the_published_version():
    # the trainer started from pi_sft v3: critic-only until it publishes past it
    assert phases.current_phase(3, 3, value_pretrain=True) == phases.VALUE_PRETRAIN
    assert phases.current_phase(None, 0, value_pretrain=True) == phases.VALUE_PRETRAIN
    assert phases.current_phase(4, 3, value_pretrain=True) == phases.PPO
    assert phases.current_phase(3, 3, value_pretrain=False) == phases.PPO


def test_the_phase_clock_closes_each_phase_when_the_next_begins():
    clock = phases.PhaseClock()
    clock.enter(phases.COLD_START, "demos", at=100.0)
    clock.enter(phases.SFT, at=130.0)
    clock.note("published pi_sft")
    clock.enter(phases.SFT, at=140.0)  # re-entering the current phase changes nothing
    clock.enter(phases.PPO, at=160.0)
    clock.close(at=400.0)
    assert [(r["phase"], r["seconds"], r["detail"]) for r in clock.rows()] == [
        (phases.COLD_START, 30.0, "demos"), (phases.SFT, 30.0, "published pi_sft"), (phases.PPO, 240.0, "")]
    assert clock.current == phases.PPO


def test_the_per_phase_table_is_task_by_phase():
    rows = [("click-test", "1 demonstrations (scripted)", 4, 1.0, 1.0), ("click-test", "3 PPO", 50, 0.82, 1.1),
            ("enter-text", "2 pi_sft", 10, 0.3, 3.0)]
    cols, table = measures.pivot(rows)
    assert cols == ["task", "1 demonstrations (scripted)", "2 pi_sft", "3 PPO"]
    assert table == [["click-test", "1.00 (4)", "-", "0.82 (50)"], ["enter-text", "-", "0.30 (10)", "-"]]


def test_the_phase_query_separates_annotator_start_and_ppo():
    sql = measures.phase_sql("pixel-r1", 2, cold_start=True, value_pretrain=True)
    assert "'scripted-pixel-r1'" in sql and "policy_version_min <= 2" in sql and "2 pi_sft (value pretraining)" in sql
    assert "'2 random init'" in measures.phase_sql("p", 0, cold_start=False, value_pretrain=False)
    with pytest.raises(ValueError):  # a policy name never reaches the SQL unchecked
        measures.phase_sql("p' OR 1=1 --", 0, cold_start=False, value_pretrain=False)


def test_value_pretraining_summary_reads_the_first_ppo_batch():
    rows = [(1, 0, 0, {M.CRITIC_ONLY: 1.0, M.EXPLAINED_VARIANCE: 0.1, M.REWARD_CORR: 0.2}),
            (2, 0, 0, {M.CRITIC_ONLY: 1.0, M.EXPLAINED_VARIANCE: 0.55, M.REWARD_CORR: 0.6}),
            (3, 1, 0, {M.CRITIC_ONLY: 0.0, M.EXPLAINED_VARIANCE: 0.5, M.REWARD_CORR: 0.7}),
            (4, 2, 0, {M.CRITIC_ONLY: 0.0, M.EXPLAINED_VARIANCE: 0.6, M.REWARD_CORR: -0.1})]
    got = measures.value_pretraining_summary(rows)
    assert got == {"critic_only_batches": 2, "explained_variance_at_end": 0.55,
                   "value_return_corr_at_ppo_start": 0.7, "explained_variance_at_ppo_start": 0.5,
                   # no episode or step counts recorded: the pooled figures are plain means
                   "episodes_at_ppo_start": None, "ppo_start_batches": 2, "ppo_start_episodes": None,
                   "value_return_corr_ppo_start_pooled": pytest.approx(0.3),
                   "explained_variance_ppo_start_pooled": pytest.approx(0.55),
                   "ppo_updates": 2, "value_return_corr_ppo_phase": pytest.approx(0.3),
                   "explained_variance_ppo_phase": pytest.approx(0.55)}
    # a run recorded before the metric groups had unprefixed names
    old = measures.value_pretraining_summary([(1, 0, 0, {"critic_only": 0.0, "value_reward_corr": -0.3})])
    assert old["critic_only_batches"] == 0 and old["value_return_corr_at_ppo_start"] == -0.3


def test_until_version_stops_once_ppo_published_that_many_past_the_start():
    from app.phase_list import reached_version

    snap = {"published": 3, "acting": 2}
    assert reached_version(2, snap, base_version=1, phase=phases.PPO)
    assert not reached_version(2, {**snap, "acting": 1}, base_version=1, phase=phases.PPO)  # no step of PPO's stored yet
    assert not reached_version(3, snap, base_version=1, phase=phases.PPO)  # v4 not yet
    assert not reached_version(0, snap, base_version=0, phase=phases.PPO)  # 0: run the whole --minutes
    assert not reached_version(1, snap, base_version=0, phase=phases.VALUE_PRETRAIN)  # a critic-only update is not PPO
    assert not reached_version(1, {}, base_version=0, phase=phases.PPO)  # a failed reading says nothing


def test_until_version_is_refused_with_a_dpo_phase_it_would_skip():
    with pytest.raises(UserError, match="dpo-minutes 0"):
        DemoConfig(until_version=3, dpo_minutes=2.0).validate()
    assert DemoConfig(until_version=3).validate().until_version == 3  # the pixel policy has no DPO phase


def test_demo_config_refuses_negative_phases():
    for bad in (dict(until_version=-1), dict(cold_start_demos=-2), dict(value_pretrain_batches=-2), dict(rft_every=-2), dict(target_kl=-2),
                dict(target_kl=-0.5), dict(target_kl=float("nan"))):
        with pytest.raises(UserError):
            DemoConfig(**bad).validate()
    with pytest.raises(UserError):
        DemoConfig(max_steps=-2).validate()
    assert DemoConfig().validate().tasks == ["default"]


def test_ppo_fine_tunes_a_cloned_policy_with_smaller_steps():
    from app.demo_report import resolved
    from trainer.rl.config import TrainConfig

    assert resolved(DemoConfig())["ppo_lr"] == 3e-4  # after the cold start
    assert resolved(DemoConfig(cold_start_demos=0))["ppo_lr"] == TrainConfig().lr  # the trainer's own default
    assert resolved(DemoConfig(ppo_lr=1e-3))["ppo_lr"] == 1e-3


def test_sync_runs_without_value_pretraining():
    """A critic-only update publishes no version and the synchronous rollout waits for one."""
    from app.demo_config import effective

    cfg, _, changed = effective(DemoConfig(sync=True))
    assert cfg.value_pretrain_batches == 0 and changed
    cfg, _, changed = effective(DemoConfig())
    assert cfg.value_pretrain_batches == 20 and not changed


def test_a_client_with_its_own_init_never_moves_back():
    from producers.policy_client import RandomClient
    from producers.policy_watch import newer
    from schemas.events import PolicyVersion

    client = RandomClient(name="p")
    client.version = 5  # e.g. an HTTP client that learnt its version from the server's replies
    v = PolicyVersion(policy="p", version=3, kind="pixel", uri="file:///w", sha256="0" * 64, created_at=1.0)
    assert not newer(v, client) and newer(v.model_copy(update={"version": 5}), client)


def test_the_correlation_verdict_follows_its_sign():
    assert "misleads" in measures.corr_verdict(-0.2)
    assert "positive" in measures.corr_verdict(0.342) and "misleads" not in measures.corr_verdict(0.342)
    assert measures.corr_verdict(None) == ""


def test_the_dpo_phase_is_the_language_policys_last_quarter_by_default():
    assert DemoConfig(minutes=20, policy_kind="lm").validate().dpo_span_s() == 300.0
    assert DemoConfig(minutes=20).validate().dpo_span_s() == 0.0  # the pixel main job: no DPO phase unless asked
    assert DemoConfig(minutes=20, dpo_minutes=2).validate().dpo_span_s() == 120.0
    assert DemoConfig(minutes=20, policy_kind="lm", dpo_minutes=0).validate().dpo_span_s() == 0.0
    assert DemoConfig(minutes=20, policy_kind="lm", cold_start_demos=0).validate().dpo_span_s() == 0.0
    for bad in (dict(dpo_minutes=20), dict(dpo_minutes=-2), dict(dpo_minutes=3, cold_start_demos=0)):
        with pytest.raises(UserError):
            DemoConfig(minutes=20, **bad).validate()


def test_sync_runs_without_a_dpo_phase():
    from app.demo_config import effective

    cfg, _, changed = effective(DemoConfig(sync=True, policy_kind="lm"))
    assert cfg.dpo_span_s() == 0.0 and any("DPO" in c for c in changed)


def test_the_language_policy_fine_tunes_with_small_steps():
    from app.demo_report import resolved
    from trainer.policies.lm.kind import LM_PPO_ARGS

    assert resolved(DemoConfig(policy_kind="lm"))["ppo_lr"] == 1e-6
    assert "--minibatch-size" in LM_PPO_ARGS


def test_the_phase_query_labels_dpo_episodes_from_its_version_on():
    sql = measures.phase_sql("lm-r1", 2, cold_start=True, value_pretrain=True, dpo_version=9)
    assert "policy_version_min >= 9, '4 DPO (from pi_sft)'" in sql
    # the DPO test comes before PPO's catch-all, after pi_sft's
    assert sql.index("policy_version_min <= 2") < sql.index(">= 9") < sql.index("'3 PPO'")
    assert "DPO" not in measures.phase_sql("lm-r1", 2, cold_start=True, value_pretrain=True)


def test_the_reflection_annotator_replays_at_the_rollouts_page_time():
    from pathlib import Path

    child = phases.reflection_annotator({}, "demo-x.", Path("/nonexistent"), "--step-ms 250 --foo 1")
    assert child.argv[-4:] == ["--group-id", "demo-x.annotate", "--step-ms", "250"]
    child = phases.reflection_annotator({}, "demo-x.", Path("/nonexistent"), "")
    assert "--step-ms" not in child.argv


def test_a_blocking_step_logs_as_it_runs_and_fails_clearly(tmp_path):
    import sys
    import time

    ok = [sys.executable, "-c", "print('epoch 1: loss 0.5'); print('published pi_sft as version 0: ...')"]
    assert phases._run_step("bc", ok, {}, tmp_path) == "published pi_sft as version 0: ..."
    assert "epoch 1" in (tmp_path / "bc.log").read_text()
    with pytest.raises(UserError, match=r"exit 3.*no demonstration"):
        phases._run_step("bc", [sys.executable, "-c", "import sys; print('no demonstration'); sys.exit(3)"], {}, tmp_path)
    ticks = []
    t0 = time.monotonic()
    with pytest.raises(UserError, match="longer than 1s"):
        phases._run_step("dpo", [sys.executable, "-c", "import time; time.sleep(30)"], {}, tmp_path, timeout_s=1,
                         tick=lambda: ticks.append(1), every_s=0.2)
    assert time.monotonic() - t0 < 10, "the step was not stopped at its timeout"
    assert len(ticks) >= 2, "no progress while the step ran"


def test_a_failed_step_is_one_line_naming_how_it_ended(tmp_path):
    from app.phases import step_failure

    log = "Loading weights: 100%\n[transformers] a warning\nINFO flywheel.dpo: DPO of p v0 on 32 pairs\n\n"
    line = step_failure("dpo", -9, log, tmp_path / "dpo.log")
    assert "\n" not in line and "killed by SIGKILL (out of memory?" in line
    assert "its last line: INFO flywheel.dpo: DPO of p v0 on 32 pairs (log " in line
    assert "failed (exit 2); its last line: no output" in step_failure("bc", 2, "", tmp_path / "bc.log")
    assert "killed by SIGTERM);" in step_failure("bc", -15, "x", tmp_path / "bc.log")
    assert "killed by signal 40);" in step_failure("bc", -40, "x", tmp_path / "bc.log")


def test_progress_line_shows_the_task_queue_apart_from_consumer_lag():
    from app.demo import format_progress

    snap = {"episodes": 12, "rates": {"click-test": (0.5, 10)}, "published": 2, "acting": 1, "updates": 3,
            "lag": {"rollout": 59941, "trainer": 52, "sink": 0}, "dlq": 1}
    line = format_progress(75, snap, "PPO")
    assert line.startswith("[01:15] PPO episodes 12 | last-100 success click-test 0.50(10) | policy v2 acting v1")
    assert "tasks queued 59941 | lag sink=0 trainer=52 | dlq 1" in line and "rollout=" not in line
    assert "tasks queued" not in format_progress(0, {"lag": {"sink": 0}})
    game = format_progress(5, {"rates": {"games.snake": (0.0, 40), "click-test": (1.0, 9)},
                               "scores": {"games.snake": (0.31, 40)}})
    assert "last-100 success click-test 1.00(9) games.snake score 0.31(40) |" in game  # a game: its normalised score


def test_the_dpo_phase_stops_ppo_and_pauses_the_workers_while_dpo_runs(monkeypatch, tmp_path):
    from app import demo

    class FakeChild:
        def __init__(self, name):
            self.name, self.running, self.starts = name, True, 0

        def stop(self, grace=30.0):
            self.running = False

        def start(self):
            self.running, self.starts = True, self.starts + 1
            return self

    children = [FakeChild(n) for n in ("sink", "streams", "trainer", "rollout-0", "rollout-1", "reflection")]
    seen = {}

    def fake_dpo(cfg, settings, env, policy, reference, logs, clock, timeout_s, tick=None):
        seen["running"] = sorted(c.name for c in children if c.running)
        return 7

    monkeypatch.setattr(phases, "dpo", fake_dpo)
    cfg = DemoConfig(minutes=20, policy_kind="lm").validate()
    version = demo._dpo_phase(cfg, None, {}, children, "p", 0, tmp_path, phases.PhaseClock(), [])
    assert version == 7 and seen["running"] == ["sink", "streams"], seen
    assert [c.name for c in children] == ["sink", "streams", "rollout-0", "rollout-1"]
    assert all(c.running for c in children) and [c.starts for c in children] == [0, 0, 1, 1]

    def failing_dpo(*args, **kwargs):
        raise UserError("flywheel dpo failed (killed by SIGKILL)")

    monkeypatch.setattr(phases, "dpo", failing_dpo)
    notes = []
    assert demo._dpo_phase(cfg, None, {}, children, "p", 0, tmp_path, phases.PhaseClock(), notes) is None
    assert all(c.running for c in children) and "DPO phase failed" in notes[0]


def test_rft_rounds_are_on_for_the_cloned_pixel_policy_by_default():
    from app.demo_report import resolved

    def rft_every(cfg: DemoConfig) -> int:  # what the trainer runs with
        return resolved(cfg)["rft_every"]

    assert rft_every(DemoConfig()) == 8  # after the cold start
    assert rft_every(DemoConfig(cold_start_demos=0)) == 0  # from random weights: few successes
    assert rft_every(DemoConfig(policy_kind="lm")) == 0  # the language policy's fine-tuning is flywheel sft
    assert rft_every(DemoConfig(rft_every=0)) == 0 and rft_every(DemoConfig(rft_every=2)) == 2
    with pytest.raises(UserError):
        DemoConfig(rft_every=-2).validate()
    with pytest.raises(UserError):
        DemoConfig(rft_every=2, policy_kind="lm").validate()


def test_the_demo_passes_policy_overrides_and_refuses_non_objects():
    assert DemoConfig(policy_config='{"ground": false}').validate().policy_overrides() == {"ground": False}
    assert DemoConfig().policy_overrides() == {}
    for bad in ("[1]", "{ground", '"x"'):
        with pytest.raises(UserError, match="policy-config"):
            DemoConfig(policy_config=bad).validate()


def test_both_kinds_read_the_pages_and_the_users_config_comes_last():
    pixel = phases.kind_config(DemoConfig().validate(), ("click",))
    assert pixel["ground"] and pixel["coords"] and pixel["action_types"] == ["click"]
    lm = phases.kind_config(DemoConfig(policy_kind="lm").validate(), ("click",))
    assert lm["ground"] and "action_types" not in lm and "coords" not in lm
    off = phases.kind_config(DemoConfig(policy_kind="lm", policy_config='{"ground": false}').validate(), ("click",))
    assert off["ground"] is False


def test_ppo_gain_is_the_mean_of_per_task_differences_with_its_standard_error():
    rows = [("a", "2 pi_sft", 100, 0.5, 2.0), ("a", "3 PPO", 100, 0.7, 2.0),
            ("b", "2 pi_sft", 25, 1.0, 1.0), ("b", "3 PPO", 400, 1.0, 1.0),  # the curriculum plays b less: no matter
            ("c", "3 PPO", 50, 0.2, 3.0), ("a", "1 demonstrations (scripted)", 20, 1.0, 2.0)]  # c: PPO only, left out
    gain, se, n = measures.phase_gain(rows, "2 pi_sft", "3 PPO")
    assert n == 2 and gain == pytest.approx(0.1)
    assert se == pytest.approx((0.25 / 100 + 0.21 / 100) ** 0.5 / 2)
    assert measures.phase_gain(rows, "2 random init", "3 PPO") is None


def test_a_games_gain_is_in_normalised_score_with_its_sample_variance():
    # phase_sql's rows carry the measure's sample variance: a game's normalised score is no proportion
    rows = [("games.2048", "2 pi_sft", 16, 0.35, 177.0, 0.31), ("games.2048", "3 PPO", 60, 0.48, 185.0, 0.39),
            ("games.snake", "2 pi_sft", 1, 0.09, 109.0, float("nan")), ("games.snake", "3 PPO", 90, 0.12, 127.0, 0.015)]
    gain, se, n = measures.phase_gain(rows, "2 pi_sft", "3 PPO")
    assert n == 2 and gain == pytest.approx((0.13 + 0.03) / 2)
    assert se == pytest.approx((0.31 / 16 + 0.39 / 60 + 0.0 + 0.015 / 90) ** 0.5 / 2)  # one episode: no spread


def test_the_phase_query_measures_a_game_by_its_normalised_score():
    sql = measures.phase_sql("pixel-g", 0, cold_start=True, value_pretrain=False)
    assert "if(isNull(normalised_score), toFloat64(success), assumeNotNull(normalised_score)) AS measure" in sql
    assert "LEFT JOIN (SELECT episode_id, normalised_score FROM trajectories FINAL" in sql


def test_the_feed_reads_no_queue_from_a_group_without_commits_and_no_backlog_once_the_trainer_stopped(monkeypatch):
    from app import demo
    from app.curriculum import TaskFeed

    lag = {"demo-r.rollout": {}, "demo-r.trainer": {"demo-r.flywheel.rl.v1": 500}, "demo-q.rollout": {"t": 3}}
    asked: list[str] = []
    monkeypatch.setattr(demo, "consumer_lag", lambda settings, group_prefix="": asked.append(group_prefix) or
                        {g: t for g, t in lag.items() if g.startswith(group_prefix)})
    assert demo.run_lags(None, "demo-r.") == {"trainer": 500}  # the rollout group's queue: unknown, not 0
    assert asked == ["demo-r."]  # only the run's groups are asked for
    sent: list = []
    feed = TaskFeed(["click-button"], queue=10, seed=0, max_steps=5, run="r",
                    send=lambda specs: sent.extend(specs) or len(specs), max_per_task=1000, allowance=4)
    demo.feed_tick(feed, None, "demo-r.", {})
    assert sent == []  # no commit yet: the tasks sent may all still be queued
    lag["demo-r.rollout"] = {"demo-r.flywheel.tasks.v1": 2}
    demo.feed_tick(feed, None, "demo-r.", {})
    assert sent == []  # the trainer is 496 trajectories behind beyond its batch: the feed waits
    demo.feed_tick(feed, None, "demo-r.", {}, trainer=False)
    assert len(sent) == 8  # DPO stopped the trainer: its group's lag no longer holds the queue back


def test_the_ui_child_takes_a_token_that_starts_with_a_dash():
    """secrets.token_urlsafe may begin with "-": passed as "--token", "-x..." read as an option and
    the ui exited with code 2, failing the demo (a 15-minute ablation run, 1 in ~64 runs)."""
    import argparse

    from app.demo_children import ui_child
    from app.ui.cli import register, token_for

    child = ui_child(1234, "-Ab3_x", Path("logs"), {})
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    args = parser.parse_args(child.argv[child.argv.index("ui"):])
    assert token_for(args, child.env) == "-Ab3_x" and args.port == 1234  # in its environment, not its argv


def test_bc_args_reach_the_cold_starts_cloning_last(monkeypatch, tmp_path):
    from app import phases
    from app.demo_config import DemoConfig

    seen = []
    monkeypatch.setattr(phases, "_run_step", lambda name, argv, env, logs, **k: seen.append(argv) or "published pi_sft")

    class Clock:
        def enter(self, *a): ...
        def note(self, *a): ...

    cfg = DemoConfig(cold_start_demos=16, bc_args="--epochs 12 --lr 0.003")
    assert phases.clone(cfg, {}, "pixel-r", ["click-test"], ("click",), tmp_path / "logs", Clock()) == "published pi_sft"
    bc = handed(seen[0])  # the cloning's whole configuration: the demo's, then the user's --bc-args
    assert bc["demos_per_task"] == 16 and (bc["epochs"], bc["lr"]) == (12, 0.003)


def test_a_suites_options_come_before_the_users_and_only_for_its_kind():
    from app import phases
    from app.demo_children import trainer_config
    from app.demo_config import DemoConfig
    from infra.runtime.command import check_argv
    from producers.suites import plan
    from trainer import cli
    from trainer.sft.bc_config import BCConfig

    games = ["games.2048", "games.snake"]
    argv = phases.bc_options(DemoConfig(cold_start_demos=4, bc_args="--epochs 3"), "pixel-r", games, ("click", "hotkey"))
    assert argv[argv.index("--lr") + 1] == "1e-3" and argv[-2:] == ["--epochs", "3"]
    assert argv.index("--lr") < argv.index("--epochs") < len(argv) - 2  # the suite's epochs, then the user's
    lm = phases.bc_options(DemoConfig(cold_start_demos=4, policy_kind="lm"), "lm-r", games, ("click", "hotkey"))
    assert "--lr" not in lm  # the games' rate is the pixel CNN's; the language policy keeps its own
    assert "--lr" not in phases.bc_options(DemoConfig(cold_start_demos=4), "pixel-r", ["click-test"], ("click",))
    cfg = check_argv(cli.register, "bc", argv, BCConfig)  # the real parser: the last option wins
    assert cfg.lr_for("pixel") == 1e-3 and cfg.epochs_for("pixel") == 3
    mixed = phases.bc_options(DemoConfig(cold_start_demos=4), "pixel-r", ["click-button", *games], ("click", "hotkey"))
    assert "--lr" not in mixed  # a run mixing suites: the games' rate is not the default suite's
    train = trainer_config(DemoConfig(trainer_args="--target-kl 0.05"), "p-", "pixel-r", plan(games))
    assert train.train.minibatch_size == 256 and train.train.target_kl == 0.05
    assert trainer_config(DemoConfig(), "p-", "pixel-r", plan(["default"])).origins["minibatch_size"] == "defaults"


def handed(argv: list[str]) -> dict:
    """The configuration file a child was handed (``--config PATH``)."""
    return json.loads(Path(argv[argv.index("--config") + 1]).read_text())


def test_expert_coef_labels_the_rollouts_and_weighs_the_labels_in_the_trainer(tmp_path):
    from app.demo_children import plan_children
    from infra.runtime.settings import load_settings
    from producers.suites import plan

    settings = load_settings({"data_dir": str(tmp_path)})
    for coef, labels in ((0.0, False), (0.5, True)):
        children = plan_children(DemoConfig(tasks="games", expert_coef=coef, dagger_every=0).validate(), settings, "p.", "pol",
                                 tmp_path / "logs", plan(["games"]))
        argv = {c.name: c.argv for c in children}
        assert ("--expert-labels" in argv["rollout-0"]) is labels
        assert handed(argv["trainer"])["expert_coef"] == (0.5 if labels else 0.0)
    for bad in (-2.0, float("nan")):
        with pytest.raises(UserError, match="expert-coef"):
            DemoConfig(expert_coef=bad).validate()
    with pytest.raises(UserError, match="scores only its own samples"):
        DemoConfig(policy_kind="lm", expert_coef=0.5).validate()


def test_dagger_every_labels_the_rollouts_and_sets_the_trainers_rounds(tmp_path):
    from app.demo_children import plan_children
    from infra.runtime.settings import load_settings
    from producers.suites import plan

    settings = load_settings({"data_dir": str(tmp_path)})
    children = plan_children(DemoConfig(tasks="games", expert_coef=0, dagger_every=2).validate(), settings, "p.", "pol",
                             tmp_path / "logs", plan(["games"]))
    argv = {c.name: c.argv for c in children}
    assert "--expert-labels" in argv["rollout-0"] and handed(argv["trainer"])["expert_coef"] == 0.0  # rounds alone
    assert handed(argv["trainer"])["dagger_every"] == 2
    with pytest.raises(UserError, match="dagger-every counts"):
        DemoConfig(dagger_every=-2).validate()
    with pytest.raises(UserError, match="scores only its own samples"):
        DemoConfig(policy_kind="lm", dagger_every=2).validate()


def test_dagger_on_auto_is_the_suites_for_a_kind_that_scores_labels():
    from app.demo_config import effective, expert_labels

    games, _, _ = effective(DemoConfig(tasks=["games"]))
    assert (games.expert_coef, games.dagger_every) == (0.0, 0) and not expert_labels(games)  # teacher-free RL
    asked, _, _ = effective(DemoConfig(tasks=["games"], expert_coef=0.5, dagger_every=0))
    assert (asked.expert_coef, asked.dagger_every) == (0.5, 0)  # the user's setting wins
    arm, _, _ = effective(DemoConfig(tasks=["games"], expert_coef=1, dagger_every=2))
    assert (arm.expert_coef, arm.dagger_every) == (1.0, 2) and expert_labels(arm)  # the teacher's arm, by name
    default, _, _ = effective(DemoConfig(tasks=["default"]))
    assert (default.expert_coef, default.dagger_every) == (0.0, 0) and not expert_labels(default)
    mixed, _, _ = effective(DemoConfig(tasks=["games.snake", "click-button"]))
    assert (mixed.expert_coef, mixed.dagger_every) == (0.0, 0)  # no suite holds both
    lm, _, _ = effective(DemoConfig(tasks=["games"], policy_kind="lm", dpo_minutes=0))
    assert (lm.expert_coef, lm.dagger_every) == (0.0, 0)  # the language policy scores only its own samples


def test_rft_rounds_on_auto_stay_off_the_games_and_where_dagger_rounds_run():
    from app.demo_config import effective
    from app.demo_report import resolved

    games, _, _ = effective(DemoConfig(tasks=["games"]))
    assert games.cold_start_demos > 0 and resolved(games)["rft_every"] == 0  # re-cloning demonstrations: a teacher during RL
    assert resolved(effective(DemoConfig(tasks=["games.snake"]))[0])["rft_every"] == 0  # a game named alone: its suite's
    assert resolved(effective(DemoConfig(tasks=["games"], rft_every=3))[0])["rft_every"] == 3  # the user's setting wins
    assert resolved(effective(DemoConfig(tasks=["default"]))[0])["rft_every"] == 8  # no DAgger there
    assert resolved(effective(DemoConfig(tasks=["default"], dagger_every=2))[0])["rft_every"] == 0  # DAgger's rounds run
    assert resolved(effective(DemoConfig(tasks=["games.snake", "click-button"]))[0])["rft_every"] == 8  # no suite holds both


def test_the_gain_at_the_runs_end_reads_each_tasks_last_episodes_against_the_same_start():
    rows = [("a", "2 pi_sft (value pretraining)", 100, 0.5, 2.0), ("a", "3 PPO", 300, 0.6, 2.0),
            ("b", "2 pi_sft (value pretraining)", 25, 0.8, 1.0), ("b", "3 PPO", 400, 0.85, 1.0)]
    last = [("a", measures.LAST_PHASE, 100, 0.9, 2.0), ("b", measures.LAST_PHASE, 100, 0.9, 1.0)]
    whole, at_end = measures.run_gains(rows, last)
    assert whole[0] == pytest.approx((0.1 + 0.05) / 2) and whole[2] == 2
    assert at_end[0] == pytest.approx((0.4 + 0.1) / 2) and at_end[2] == 2
    assert at_end[1] == pytest.approx((0.25 / 100 + 0.09 / 100 + 0.16 / 25 + 0.09 / 100) ** 0.5 / 2)
    assert measures.run_gains(rows, [])[1] is None  # no episode read at the end: no gain, not a zero
    assert measures.run_gains([r for r in rows if r[1] == "3 PPO"], last) == (None, None)  # no starting phase


def test_the_critic_at_ppo_start_is_pooled_over_its_first_batches():
    """A game's batch may hold two episodes, whose correlation is +-1 whatever the critic: the
    pooled figure weighs each of the first three PPO batches' correlation by its episodes less
    two, and its explained variance (over steps) by its steps; the verdict goes by the pooled one."""
    def ppo(ev, corr, n, steps):
        return {M.CRITIC_ONLY: 0.0, M.EXPLAINED_VARIANCE: ev, M.REWARD_CORR: corr, M.EPISODES: n, M.STEPS: steps}

    rows = [(1, 0, 0, {M.CRITIC_ONLY: 1.0, M.EXPLAINED_VARIANCE: 0.4, M.REWARD_CORR: 0.9, M.EPISODES: 8.0}),
            (2, 1, 0, ppo(-10.0, -1.0, 2.0, 100.0)), (3, 2, 0, ppo(0.5, 0.5, 6.0, 1000.0)),
            (4, 3, 0, ppo(0.8, 0.0, 3.0, 900.0)),
            (5, 4, 0, ppo(0.9, -1.0, 30.0, 1000.0))]  # the fourth PPO batch is past the pool
    got = measures.value_pretraining_summary(rows)
    assert got["episodes_at_ppo_start"] == 2.0 and got["value_return_corr_at_ppo_start"] == -1.0
    assert got["ppo_start_batches"] == 3 and got["ppo_start_episodes"] == 11.0
    assert got["value_return_corr_ppo_start_pooled"] == pytest.approx((0 * -1.0 + 4 * 0.5 + 1 * 0.0) / 5)
    assert got["explained_variance_ppo_start_pooled"] == pytest.approx((-10.0 * 100 + 0.5 * 1000 + 0.8 * 900) / 2000)
    # over the whole PPO phase: every PPO batch pooled alike, the fourth included
    assert got["value_return_corr_ppo_phase"] == pytest.approx((0 * -1.0 + 4 * 0.5 + 1 * 0.0 + 28 * -1.0) / 33)
    assert got["explained_variance_ppo_phase"] == pytest.approx((-10.0 * 100 + 0.5 * 1000 + 0.8 * 900 + 0.9 * 1000) / 3000)
    # an update whose batch had no correlation (one episode) still has its critic's explained variance
    lone = measures.value_pretraining_summary(rows + [(6, 5, 0, {M.CRITIC_ONLY: 0.0, M.EXPLAINED_VARIANCE: -1.0,
                                                                M.EPISODES: 1.0, M.STEPS: 1000.0})])
    assert lone["value_return_corr_ppo_phase"] == got["value_return_corr_ppo_phase"]
    assert lone["explained_variance_ppo_phase"] == pytest.approx((-10.0 * 100 + 0.5 * 1000 + 0.8 * 900 - 0.1 * 1000) / 4000)
    said = measures.critic_sentence(got)
    assert "at PPO's first batch (2 episodes) the critic's explained variance was -10.000" in said
    assert "over PPO's first 3 batches (11 episodes) 0.110 and 0.400 (positive" in said
    assert "failure signature" not in said  # the two-episode batch's -1 is not read as the critic's failing
    assert said.endswith("Over all 4 PPO updates, pooled alike: 0.373 and -0.788 (the explained variance is against "
                         "the critic's own targets, its lambda_critic-returns).")
    assert "Over all" not in measures.critic_sentence(measures.value_pretraining_summary(rows[:4]))  # 3: the pool
    # only two-episode batches: no pooled correlation to give, and the first batch's figure stands alone
    twos = measures.value_pretraining_summary(rows[:3] + [(9, 5, 0, ppo(0.1, -1.0, 2.0, 10.0))])
    assert twos["ppo_start_batches"] == 3 and twos["value_return_corr_ppo_start_pooled"] == pytest.approx(0.5)
    only_twos = measures.value_pretraining_summary([rows[1], (9, 5, 0, ppo(0.1, 1.0, 2.0, 10.0))])
    assert only_twos["value_return_corr_ppo_start_pooled"] is None
    assert "failure signature" in measures.critic_sentence(only_twos)
    # a run with one PPO batch, or none: no pooled clause, nothing invented
    one = measures.value_pretraining_summary(rows[:2])
    assert one["ppo_start_batches"] == 1 and "first 1 batches" not in measures.critic_sentence(one)
    none = measures.value_pretraining_summary(rows[:1])
    assert none["value_return_corr_ppo_start_pooled"] is None and none["episodes_at_ppo_start"] is None
    assert measures.critic_sentence(none).endswith("correlation -.")


def test_until_episodes_stops_once_every_task_has_ended_that_many():
    from app.phase_list import reached_episodes

    snap = {"rates": {"a": (0.5, 20), "b": (0.0, 19)}}
    assert not reached_episodes(20, snap, ["a", "b"])  # b is one short
    assert reached_episodes(19, snap, ["a", "b"]) and not reached_episodes(0, snap, ["a", "b"])  # 0: off
    assert not reached_episodes(1, snap, ["a", "b", "c"])  # a task with no ended episode yet
    for bad in (-1, 101):
        with pytest.raises(UserError, match="until-episodes"):
            DemoConfig(until_episodes=bad).validate()
    from types import SimpleNamespace

    from app.phase_list import goal_reached

    ctx = SimpleNamespace(cfg=DemoConfig(until_episodes=19), plan=SimpleNamespace(tasks=("a", "b")),
                          learner=SimpleNamespace(base_version=0))
    assert "--until-episodes" in goal_reached(ctx, snap, "PPO", 0.0)  # the run's goal line, and the run stops
    ctx.cfg = DemoConfig(until_episodes=20)
    assert goal_reached(ctx, snap, "PPO", 0.0) == ""


def test_mean_se_is_the_spread_of_independent_units_and_its_text_says_how_many():
    """Gains over seeds (or tasks taken as a sample) are their mean ± sample SD / sqrt(n): 0.1, 0.2,
    0.3 -> 0.2 ± 0.0577; one unit has no SE, none no mean; None values are left out of the text."""
    mean, se = measures.mean_se([0.1, 0.2, 0.3])
    assert mean == pytest.approx(0.2) and se == pytest.approx(0.1 / 3 ** 0.5)
    assert measures.mean_se([0.4]) == (0.4, None) and measures.mean_se([]) is None
    assert measures.mean_se_text([0.1, None, 0.3]) == "+0.200 ± 0.100"
    assert measures.mean_se_text([0.25, None]) == "+0.250 (1 seed)"
    assert measures.mean_se_text([None]) == "-" and measures.mean_se_text([0.5, 0.7], sign=False) == "0.600 ± 0.100"
