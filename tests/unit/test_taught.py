"""What taught a run (app.taught, issue 56): derived from its resolved configuration, named in the
report's phase table and figures, and the learning curve plots a game's normalised score."""

from __future__ import annotations

import json

import pytest
from types import SimpleNamespace

from app import report, taught
from app.demo_children import trainer_config
from app.demo_config import DemoConfig, effective
from app.report import RunInfo, curve_measure, taught_line, write_report
from app.taught import Taught, phase_heading, rl_label, sources, taught_of
from producers.suites import plan


def train(rft_every=0, expert_coef=0.0, dagger_every=0, sil_coef=0.0):
    return SimpleNamespace(rft_every=rft_every, expert_coef=expert_coef, dagger_every=dagger_every, sil_coef=sil_coef)


def of_run(**demo) -> Taught:
    """What the demo would record for a run with these options (its resolution, then the trainer's)."""
    cfg, _, _ = effective(DemoConfig(**demo))
    resolved = trainer_config(cfg, "demo-x.", "pixel-x", plan(cfg.tasks, cfg.max_steps), {}).train
    return taught_of(cfg.cold_start_demos, cfg.demos_from, cfg.demo_noise, resolved)


def test_reward_alone_from_random_weights_without_a_teacher():
    t = taught_of(0, "scripted", 0.2, train())
    assert t == Taught("", 0.0, 0, 0.0, 0) and not t.teacher_in_rl and not t.recloned
    assert taught.line(t) == "Taught by: reward alone."
    assert rl_label(t) == "RL phase (reward)"


def test_each_source_is_named_from_the_setting_that_turns_it_on():
    cold = taught_of(20, "scripted", 0.2, train())
    assert sources(cold) == ["reward", "scripted demonstrations (the cold start's pi_sft, 20% mistakes)"]
    assert rl_label(cold) == "RL phase (reward)"  # the demonstrations taught pi_sft, not RL
    human = taught_of(5, "human", 0.0, train())
    assert "human demonstrations (the cold start's pi_sft)" in sources(human)
    rft = taught_of(20, "scripted", 0.0, train(rft_every=4))
    assert "RFT rounds every 4 updates re-cloning the demonstrations" in sources(rft) and rft.recloned
    assert rl_label(rft) == "RL phase (reward + demonstrations re-cloned)" and not rft.teacher_in_rl
    own = taught_of(0, "scripted", 0.0, train(rft_every=4))  # no demonstrations to re-clone
    assert sources(own) == ["reward", "RFT rounds every 4 updates on the policy's own successes"]
    assert rl_label(own) == "RL phase (reward)"
    expert = taught_of(20, "scripted", 0.2, train(expert_coef=0.5))
    assert expert.teacher_in_rl and "a teacher during RL: the solvers' labels x 0.5 in PPO's loss" in sources(expert)
    dagger = taught_of(0, "scripted", 0.0, train(dagger_every=2))
    assert dagger.teacher_in_rl and rl_label(dagger) == "RL phase (reward + teacher)"
    assert "DAgger rounds every 2 updates" in taught.line(dagger)


def test_the_games_default_is_teacher_free_and_their_teacher_arms_are_named():
    games = of_run(tasks=["games"])
    assert games.demonstrations == "scripted" and games.demo_noise == 0.2
    assert (games.rft_every, games.expert_coef, games.dagger_every) == (0, 0.0, 0)
    assert rl_label(games) == "RL phase (reward)"
    arm = of_run(tasks=["games"], expert_coef=1, dagger_every=2)
    assert arm.teacher_in_rl and rl_label(arm) == "RL phase (reward + teacher)"
    default = of_run(tasks=["default"])  # RFT rounds re-clone the default suite's demonstrations
    assert default.recloned and rl_label(default) == "RL phase (reward + demonstrations re-cloned)"
    # from random weights the demo turns self-imitation on (app.run_config.kind_sil_coef): still reward alone
    assert taught.line(of_run(tasks=["starter"])).startswith("Taught by: reward alone (self-imitation")
    assert taught.line(of_run(tasks=["starter"], sil_coef=0)) == "Taught by: reward alone."


def test_the_phase_table_separates_pi_sft_from_what_rl_added():
    t = taught_of(20, "scripted", 0.2, train(dagger_every=2))
    assert phase_heading("2 pi_sft", t) == "2 π_sft (scripted demonstrations)"
    assert phase_heading("2 pi_sft (value pretraining)", t) == "2 π_sft (scripted demonstrations) (value pretraining)"
    assert phase_heading("3 PPO", t) == "3 RL phase (reward + teacher)"
    assert phase_heading("3 PPO, last 100", t) == "3 RL phase (reward + teacher), last 100"
    for kept in ("1 demonstrations (scripted)", "2 random init", "4 DPO (from pi_sft)"):
        assert phase_heading(kept, t) == kept
    # a run from another run's version cloned nothing: its starting column names that version
    copied = taught_of(0, "scripted", 0.0, train(), start_from="sft-s0@0", start_taught="scripted demonstrations")
    assert phase_heading("2 pi_sft (value pretraining)", copied) == "2 start sft-s0@0 (value pretraining)"


def test_the_learning_curve_plots_a_games_normalised_score():
    game = ("games.snake", 1.0, 4, 0.31, "normalised score")
    task = ("click-test", 1.0, 4, 0.5, "success")
    assert curve_measure([game]) == "normalised score"
    assert curve_measure([task]) == "success"
    assert curve_measure([game, task]) == "success, a game's normalised score"
    assert curve_measure([]) == "success"


def test_the_report_names_what_taught_the_run_beside_each_learning_figure(monkeypatch, tmp_path):
    t = taught_of(20, "scripted", 0.2, train())
    run = RunInfo(run_id="r1", policy="pixel-r", mode="async", started_at=0.0, ended_at=600.0,
                  config={"taught_by": taught.record(t)})
    curve = report.Q.success_over_time(run.policy, report.bucket_seconds(600.0), 0.0)
    rows = {curve: [("games.snake", 1.0, 4, 0.31, "normalised score")]}
    monkeypatch.setattr(report, "query", lambda settings, sql: (["c0", "c1", "c2", "c3", "c4"], rows.get(sql, [])))
    monkeypatch.setattr(report, "plot_learning_curve", lambda rows, path, bucket_s: path.name)
    text = write_report(None, run, tmp_path).read_text()
    said = "Taught by: reward; scripted demonstrations (the cold start's pi_sft, 20% mistakes)."
    assert taught_line(run.config) == said
    assert "## Learning curve: normalised score over wall-clock" in text
    assert text.count(said) >= 4  # the head, the learning curve, the suite mean, by version
    assert taught_line({}) == ""  # a run recorded before it was: nothing said
    assert json.loads((tmp_path / "summary.json").read_text())["taught_by"]["teacher_in_rl"] is False


def test_self_imitation_is_named_beside_reward_alone_not_as_a_teacher():
    """Self-imitation fits episodes reward picked: the run is still taught by reward alone, and says how."""
    t = taught_of(0, "scripted", 0.0, train(sil_coef=0.5))
    assert t.sil_coef == 0.5 and not t.teacher_in_rl
    assert taught.line(t) == "Taught by: reward alone (self-imitation of the policy's own best episodes x 0.5)."
    assert rl_label(t) == "RL phase (reward)"
    cold = taught_of(20, "scripted", 0.2, train(sil_coef=0.5))
    assert taught.line(cold).startswith("Taught by: reward (self-imitation of the policy's own best episodes x 0.5); scripted")


def test_a_judges_reward_is_named_where_the_streams_hand_it_the_tasks(monkeypatch):
    """RL on a learned verifier's verdict is reward alone, but not the page's: the report says
    whose, read as `flywheel streams` resolves its options (its parser, FLYWHEEL_* variables)."""
    from app.demo_children import judged_tasks
    from infra.runtime.errors import UserError

    def judged(streams_args, **env):
        return judged_tasks(DemoConfig(streams_args=streams_args), env)

    url = "--judge-url http://127.0.0.1:8765/score"
    assert judged(f"{url} --judge-tasks * --judge-success-at 0.2") == "*"
    assert judged(f"{url} --judge-tasks=click-tab,click-link") == "click-link,click-tab"
    assert judged(f"{url} --judge-tasks a,* --judge-tasks b") == "b"  # the last one given, as argparse reads it
    assert judged(f"{url} --judge-tasks ,") == ""  # no task: the page's verdict
    assert judged(url) == "" and judged("") == ""  # the judge, if any, only adds a component
    assert judged(url, FLYWHEEL_JUDGE_TASKS="*") == "*"
    with pytest.raises(UserError, match=r"the streams' options \(--streams-args, FLYWHEEL_\* variables\): judge tasks \* need a judge: set --judge-url"):
        judged("--judge-tasks *")
    with pytest.raises(UserError, match="--judge-success-at 1.5 must be a judge score"):  # the streams' own rule
        judged(f"{url} --judge-tasks * --judge-success-at 1.5")
    with pytest.raises(UserError, match="flywheel streams would refuse"):
        judged("--judge-taks *")
    every = taught_of(0, "scripted", 0.0, train(sil_coef=0.5), judged="*")
    assert taught.line(every) == ("Taught by: reward alone (the verdict of the judge at --judge-url, not the "
                                  "page's, on every task; self-imitation of the policy's own best episodes x 0.5).")
    some = taught_of(0, "scripted", 0.0, train(), judged="click-link")
    assert sources(some) == ["reward (the verdict of the judge at --judge-url, not the page's, on click-link)"]
    assert taught.record(some)["judged"] == "click-link" and not some.teacher_in_rl
