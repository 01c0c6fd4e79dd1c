"""The main job's phases as a declared list (app.phase_list), and --minutes as the whole run's
budget: each phase before RL ends by its share's deadline, SFT's epochs cut to fit it, and a
run without an RL update says so."""

from __future__ import annotations

import time

import pytest

from app import phase_list, phases
from app.demo import DemoConfig, effective
from app.phase_list import PHASES, Budget, Ctx, before_rl, rl_update_line, sft_epochs
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

    def clone(*a, epochs=None, timeout_s=None, **k):
        seen["clone"] = (epochs, timeout_s, time.time())
        return "published v1"

    monkeypatch.setattr(phases, "demonstrate", demonstrate)
    monkeypatch.setattr(phases, "skip_leftover_tasks", lambda *a, **k: {})
    monkeypatch.setattr(phases, "demonstration_steps", lambda settings, policy: 12000)
    monkeypatch.setattr(phases, "clone", clone)
    budget = Budget(time.time(), cfg.minutes)
    ctx = Ctx(cfg, None, {}, "p.", "pixel-r", plan(["games"]), cold, tmp_path, phases.PhaseClock(), {"flag": False})
    before_rl(ctx, budget)
    assert seen["demonstrate"] == budget.deadline(phases.COLD_START)
    epochs, timeout_s, at = seen["clone"]
    assert epochs == sft_epochs(20, 12000, timeout_s) < 20  # the suite's 20, cut (the cold start left SFT its share)
    assert any(f"SFT: {epochs} epochs of the 20 asked" in n for n in ctx.notes)
    assert at + timeout_s == pytest.approx(budget.deadline(phases.SFT), abs=2.0)
    seen.clear()
    ctx.stop["flag"] = True  # stopped: no further phase starts
    before_rl(ctx, budget)
    assert not seen


def test_the_clone_takes_the_cut_epochs_last_and_its_deadline(monkeypatch, tmp_path):
    seen = []
    monkeypatch.setattr(phases, "_run_step", lambda name, argv, env, logs, timeout_s: seen.append((argv, timeout_s))
                        or "published pi_sft")
    cfg = DemoConfig(cold_start_demos=16, bc_args="--epochs 12")
    phases.clone(cfg, {}, "pixel-r", ["click-test"], ("click",), tmp_path, phases.PhaseClock(), epochs=3, timeout_s=50)
    argv, timeout_s = seen[0]
    assert argv[-2:] == ["--epochs", "3"] and timeout_s == 50  # after the user's 12: --minutes bounds the run
