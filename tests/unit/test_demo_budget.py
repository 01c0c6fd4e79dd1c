"""The main job's phases as a declared list (app.phase_list), and --minutes as the whole run's
budget: each phase before RL ends by its share's deadline, SFT's epochs cut to fit it, and a
run without an RL update says so."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from app import phase_list, phases
from app.demo_config import DemoConfig, effective
from app.phase_list import PHASES, Budget, Ctx, rl_update_line, run_phases, sft_epochs, sft_train_budget
from producers.suites import get_suite, plan


def test_the_phases_are_one_declared_list_in_the_jobs_order_with_growing_deadlines():
    assert [p.name for p in PHASES] == [phases.COLD_START, phases.SFT, phases.VALUE_PRETRAIN, phases.PPO, phases.DPO]
    ends = [p.ends_by for p in PHASES]
    assert ends == sorted(ends) and ends[-1] == 1.0 and 0 < ends[0]
    assert phase_list.PPO_FLOOR >= 0.4  # what the cold start and SFT leave to RL at the least
    assert all(p.starts and p.done and p.reports for p in PHASES)
    assert [p.name for p in PHASES if p.step] == [phases.COLD_START, phases.SFT]  # run before the learner starts
    budget = Budget(t0=1000.0, minutes=4)
    assert budget.end == 1240.0 and budget.deadline(phases.COLD_START) == pytest.approx(1000 + 0.3 * 240)
    assert budget.left(phases.SFT, 1000 + 0.55 * 240 + 5) == 0.0


def test_sfts_epochs_are_cut_to_end_within_its_share():
    # the games at --minutes 4: ~2,000 demonstration steps, 20 epochs asked (the suite's), a minute of SFT
    assert sft_epochs(20, 2000, 60.0) == 4
    assert sft_epochs(20, 12000, 60.0) == 1  # never none: pi_sft is the run's start
    assert sft_epochs(40, 1955, 600.0) == 40  # never more than asked
    assert sft_epochs(20, 0, 60.0) == 20  # unknown steps: the deadline alone bounds it


def test_a_run_says_whether_it_made_an_rl_update():
    assert rl_update_line(1, 2) == ""
    assert "NO RL UPDATE" in rl_update_line(1, 1) and "v1" in rl_update_line(1, 1)
    assert "no version was read" in rl_update_line(0, None)


def test_the_cold_start_and_sft_get_their_deadlines_and_the_clone_fewer_epochs(monkeypatch, tmp_path):
    games = frozenset(get_suite("games").tasks)
    cfg, cold, _ = effective(DemoConfig(tasks=["games"], minutes=4), games)
    seen: dict = {}

    def demonstrate(*a, deadline=None, **k):
        seen["demonstrate"] = deadline
        return 60

    def clone(*a, epochs=None, timeout_s=None, train_budget_s=0.0, **k):
        seen["clone"] = (epochs, timeout_s, time.time())
        seen["train_budget_s"] = train_budget_s
        return "published v1"

    monkeypatch.setattr(phases, "demonstrate", demonstrate)
    monkeypatch.setattr(phases, "skip_leftover_tasks", lambda *a, **k: {})
    monkeypatch.setattr(phases, "demonstration_steps", lambda settings, policy: 12000)
    monkeypatch.setattr(phases, "clone", clone)
    budget = Budget(time.time(), cfg.minutes)
    ctx = Ctx(cfg, None, {}, "p.", "pixel-r", plan(["games"]), cold, tmp_path, phases.PhaseClock(), phases.Stop())
    before_rl = [p for p in PHASES if p.step]  # the cold start and SFT: no learner needed
    run_phases(ctx, budget, before_rl)
    assert seen["demonstrate"] == budget.deadline(phases.COLD_START)
    epochs, timeout_s, at = seen["clone"]
    assert epochs == sft_epochs(20, 12000, timeout_s) < 20  # the suite's 20, cut (the cold start left SFT its share)
    assert any(f"SFT: {epochs} epochs of the 20 asked" in n for n in ctx.notes)
    assert at + timeout_s == pytest.approx(budget.deadline(phases.SFT), abs=2.0)
    # whatever the epochs' estimate, bc starts no epoch past its training budget, inside the deadline
    assert seen["train_budget_s"] == sft_train_budget(timeout_s) and 0 < seen["train_budget_s"] < timeout_s
    seen.clear()
    ctx.stop.set("stopped by Ctrl-C")  # stopped: no further phase starts
    run_phases(ctx, budget, before_rl)
    assert not seen


def test_the_clone_takes_the_cut_epochs_last_and_its_deadline(monkeypatch, tmp_path):
    seen = []
    monkeypatch.setattr(phases, "_run_step", lambda name, argv, env, logs, timeout_s: seen.append((argv, timeout_s))
                        or "published pi_sft")
    cfg = DemoConfig(cold_start_demos=16, bc_args="--epochs 12")
    phases.clone(cfg, {}, "pixel-r", ["click-test"], ("click",), tmp_path / "logs", phases.PhaseClock(), epochs=3,
                 timeout_s=50)
    argv, timeout_s = seen[0]
    handed = json.loads(Path(argv[argv.index("--config") + 1]).read_text())  # its whole configuration
    assert handed["epochs"] == 3 and timeout_s == 50  # over the user's 12: --minutes bounds the run
    assert handed["train_budget_s"] == 0  # none given: every epoch
    seen.clear()
    phases.clone(cfg, {}, "pixel-r", ["click-test"], ("click",), tmp_path / "logs", phases.PhaseClock(), epochs=3,
                 timeout_s=50, train_budget_s=12.5)
    handed = json.loads(Path(seen[0][0][seen[0][0].index("--config") + 1]).read_text())
    assert handed["train_budget_s"] == 12.5


def test_sfts_training_budget_leaves_bc_its_start_an_epoch_and_publishing():
    assert sft_train_budget(60) == 15.0  # 60 s: 30 s to start, 15 s margin
    assert sft_train_budget(300) == pytest.approx(300 - 30 - 0.25 * 270)
    assert sft_train_budget(20) == 10.0  # never below 10 s: one epoch always runs anyway
    for seconds in (60, 120, 600, 3600):
        assert sft_train_budget(seconds) < seconds - phase_list.BC_START_S


def reading(published: int, acting: int, updates: int) -> dict:
    """A progress reading of the versions (app.demo.snapshot reads them together)."""
    return {"published": published, "acting": acting, "updates": updates, "dlq": 0}


class Learner:
    """Stands in for the demo's learner: a reading at every tick, the version it started from and
    what the phases asked of it."""

    def __init__(self, readings: list[dict], base_version: int = 1) -> None:
        self.readings, self.base_version, self.asked = iter(readings), base_version, []

    def start(self) -> str:
        self.asked.append("start")
        return "" if self.asked.count("start") > 1 else f"the trainer starts from v{self.base_version}"

    def tick(self) -> dict | None:
        time.sleep(0.01)
        return next(self.readings, reading(2, 2, 5))

    def dpo(self) -> None:
        self.asked.append(("dpo", time.time()))


class Run:
    """The demo's options the phases read."""

    def __init__(self, value_pretrain_batches=20, dpo_s=0.0, until_version=0, until_target=False,
                 until_episodes=0) -> None:
        self.value_pretrain_batches, self.dpo_s = value_pretrain_batches, dpo_s
        self.until_version, self.until_target, self.until_episodes = until_version, until_target, until_episodes

    def dpo_span_s(self) -> float:
        return self.dpo_s


def rl_ctx(cfg: Run, learner: Learner, tmp_path) -> Ctx:
    cold = phases.cold_start_plan(["click-test"], 0, frozenset())  # from random weights: no cold start, no SFT
    return Ctx(cfg, None, {}, "p.", "pixel-r", plan(["click-test"]), cold, tmp_path, phases.PhaseClock(),
               phases.Stop(), learner=learner)


def test_the_run_steps_through_the_phases_the_trainer_runs_each_to_its_done_or_deadline(tmp_path):
    learner = Learner([{}, reading(1, 1, 2), reading(2, 1, 3)])
    ctx = rl_ctx(Run(dpo_s=1.0), learner, tmp_path)
    budget = Budget(time.time(), 2.0 / 60)  # a two-second run, its last second DPO's
    run_phases(ctx, budget)
    spans = ctx.clock.rows()
    assert [r["phase"] for r in spans] == [phases.VALUE_PRETRAIN, phases.PPO]  # DPO's clock is its step's (stand-in)
    assert spans[0]["detail"] == "the trainer starts from v1"  # value pretraining ends at the first version past v1
    assert learner.asked[:2] == ["start", "start"] and learner.asked[2][0] == "dpo"  # started once, by the first
    assert budget.end - 1.05 <= learner.asked[2][1] <= budget.end - 0.5  # PPO ends where DPO's last minutes begin
    assert time.time() >= budget.end  # then DPO's version acts until the run's end
    assert "trainer updates" in spans[1]["detail"] and not ctx.stop.is_set()


def test_a_phase_the_run_has_not_is_skipped_and_the_runs_goal_stops_it(tmp_path):
    learner = Learner([reading(1, 1, 0), reading(3, 2, 4)])
    ctx = rl_ctx(Run(value_pretrain_batches=0, dpo_s=0.3, until_version=2), learner, tmp_path)
    budget = Budget(time.time(), 1.0)  # a minute: --until-version ends it long before
    run_phases(ctx, budget)
    assert [r["phase"] for r in ctx.clock.rows()] == [phases.PPO]  # no value pretraining asked
    assert ctx.stop.is_set() and "--until-version 2" in ctx.stop.reason and ctx.notes == [ctx.stop.reason]
    assert "dpo" not in [a[0] if isinstance(a, tuple) else a for a in learner.asked]  # the run ended before DPO
    assert time.time() - budget.t0 < 5
