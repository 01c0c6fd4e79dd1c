"""Every exit path of `flywheel demo` stops what it started: its children (stand-ins here: real
processes that sleep) and the broker it started (a stand-in that records its stop), unless
--keep-broker; the platform and the phases are stand-ins, so each path runs in well under a second."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pytest

from app import demo, demo_report, measures, phase_list, phases
from app.demo import run_demo
from app.demo_config import DemoConfig
from infra.runtime.errors import UserError
from infra.runtime.procs import Child
from infra.runtime.settings import load_settings


class Broker:
    """Stands in for the LocalCluster the demo starts."""

    bootstrap = "127.0.0.1:1"

    def __init__(self) -> None:
        self.stopped = False

    def stop(self) -> list[int]:
        self.stopped = True
        return [1]


class Run:
    """A demo run with stand-ins for the platform, the phases and the children; ``children``
    holds every child the run planned."""

    def __init__(self, monkeypatch, tmp_path: Path, exiting: str = "") -> None:
        self.broker, self.children, self.reports = Broker(), [], []
        self.tmp_path, self.monkeypatch = tmp_path, monkeypatch
        self.published = iter([False])  # the run-id check: unused; then the trainer has published
        monkeypatch.setattr(demo, "broker_to_start", lambda settings: self.broker)
        monkeypatch.setattr(demo, "ensure_platform", lambda settings, broker: None)
        monkeypatch.setattr(demo, "_published", lambda settings, policy: next(self.published, True))
        monkeypatch.setattr(demo, "_endpoint_up", lambda settings: True)
        monkeypatch.setattr(demo, "_latest_version", lambda settings, policy: 1)
        monkeypatch.setattr(demo, "snapshot", lambda settings, policy, prefix: {})
        monkeypatch.setattr(demo, "run_lags", lambda settings, prefix: {"rollout": 0, "trainer": 0})
        monkeypatch.setattr(demo, "plan_children", self.plan)
        monkeypatch.setattr(phases, "demonstrate", lambda *a, **k: 4)
        monkeypatch.setattr(phases, "skip_leftover_tasks", lambda *a, **k: {})
        monkeypatch.setattr(phases, "clone", lambda *a, **k: "published v1")
        monkeypatch.setattr(phases, "submit", lambda *a, **k: None)
        monkeypatch.setattr(phases, "send_tasks", lambda settings, specs: len(specs))
        monkeypatch.setattr(measures, "report_section", lambda *a, **k: ([], {}))
        monkeypatch.setattr("app.report.write_report", self.write_report)
        self.exiting = exiting  # the name of a child that exits with code 3 soon after it starts

    def plan(self, cfg, settings, prefix, policy, logs, plan, trainer=None) -> list[Child]:
        names = ["sink", "streams", "trainer", "rollout-0"]
        self.children = [Child(n, [sys.executable, "-c", self.code(n)], logs / f"{n}.log") for n in names]
        return self.children

    def code(self, name: str) -> str:
        return "import time, sys; time.sleep(0.3); sys.exit(3)" if name == self.exiting else "import time; time.sleep(60)"

    def write_report(self, settings, run, out, extra, extra_summary=None) -> Path:
        self.reports.append(run)
        return out / "report.md"

    def config(self, **kw) -> DemoConfig:
        base = dict(tasks=["quick"], minutes=0.005, progress_s=0.05, ui=False, report_dir=str(self.tmp_path / "r"))
        return DemoConfig(**{**base, **kw})

    def settings(self):
        return load_settings({"data_dir": str(self.tmp_path)}, env={})

    def started(self) -> list[Child]:
        return [c for c in self.children if c.proc is not None]

    def all_stopped(self) -> bool:
        return all(not c.alive for c in self.children)


def test_a_failing_clone_stops_the_started_children_and_the_broker(monkeypatch, tmp_path, capsys):
    run = Run(monkeypatch, tmp_path)

    def bc_fails(*a, **k):
        raise UserError("flywheel bc failed (exit 2)")

    monkeypatch.setattr(phases, "clone", bc_fails)
    with pytest.raises(UserError, match="bc failed"):
        run_demo(run.config(), run.settings())
    assert [c.name for c in run.started()] == ["sink", "streams"] and run.all_stopped()
    assert run.broker.stopped and "stopped the Kafka broker" in capsys.readouterr().out
    assert not run.reports


def test_a_child_that_dies_stops_the_others_and_the_broker(monkeypatch, tmp_path):
    run = Run(monkeypatch, tmp_path, exiting="streams")
    with pytest.raises(UserError, match="streams exited with code 3"):
        run_demo(run.config(minutes=1.0), run.settings())
    assert len(run.started()) == 4 and run.all_stopped() and run.broker.stopped


def test_ctrl_c_stops_everything_and_still_writes_the_report(monkeypatch, tmp_path):
    run = Run(monkeypatch, tmp_path)

    def interrupted(*a):
        raise KeyboardInterrupt

    monkeypatch.setattr(demo, "snapshot", interrupted)
    path = run_demo(run.config(minutes=1.0), run.settings())
    assert path.name == "report.md" and "stopped by Ctrl-C" in run.reports[0].notes
    assert len(run.started()) == 4 and run.all_stopped() and run.broker.stopped


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])  # SIGHUP: the terminal closed
def test_sigterm_or_sighup_during_a_blocking_phase_stops_everything(monkeypatch, tmp_path, signum):
    run = Run(monkeypatch, tmp_path)
    # as from a terminal, whatever this test runs under (`nohup` ignores SIGHUP: then the demo
    # leaves it ignored, test_a_run_under_nohup_keeps_ignoring_sighup)
    inherited = signal.signal(signum, signal.SIG_DFL)
    before = signal.getsignal(signum)

    def terminated_during_demonstrations(*a, **k):
        os.kill(os.getpid(), signum)
        raise AssertionError("the signal should have stopped the demonstrations")

    monkeypatch.setattr(phases, "demonstrate", terminated_during_demonstrations)
    try:
        run_demo(run.config(minutes=1.0), run.settings())
        assert signal.getsignal(signum) is before  # the demo's handler is gone once it returns
    finally:
        signal.signal(signum, inherited)
    assert f"stopped by {signal.Signals(signum).name}" in run.reports[0].notes
    assert [c.name for c in run.started()] == ["sink", "streams"] and run.all_stopped() and run.broker.stopped


def test_a_failing_report_still_stops_the_broker(monkeypatch, tmp_path):
    run = Run(monkeypatch, tmp_path)

    def report_fails(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr("app.report.write_report", report_fails)
    with pytest.raises(OSError):
        run_demo(run.config(), run.settings())
    assert len(run.started()) == 4 and run.all_stopped() and run.broker.stopped


def test_a_platform_that_fails_to_come_up_is_stopped(monkeypatch, tmp_path):
    run = Run(monkeypatch, tmp_path)

    def drift(settings, broker):
        raise UserError("topic drift: flywheel.steps.v1 has 3 partitions, 6 declared")

    monkeypatch.setattr(demo, "ensure_platform", drift)
    with pytest.raises(UserError, match="drift"):
        run_demo(run.config(), run.settings())
    assert not run.started() and run.broker.stopped


def test_keep_broker_leaves_the_broker_and_says_so(monkeypatch, tmp_path, capsys):
    run = Run(monkeypatch, tmp_path)
    run_demo(run.config(keep_broker=True), run.settings())
    assert run.all_stopped() and not run.broker.stopped
    assert "left running (--keep-broker)" in capsys.readouterr().out.splitlines()[-1]


def test_tasks_without_a_demonstrator_are_named_before_anything_starts(monkeypatch, tmp_path, capsys):
    run = Run(monkeypatch, tmp_path)
    cloned = []
    monkeypatch.setattr(phases, "clone", lambda cfg, env, policy, tasks, *a, **k: cloned.append(tasks) or "published v1")
    run_demo(run.config(tasks=["click-test", "click-link"]), run.settings())
    first = capsys.readouterr().out.splitlines()[:2]
    assert "click-test" in first[0] and "no demonstrator for click-link" in first[1]
    assert cloned == [["click-test"]]
    with pytest.raises(UserError, match="click-link"):  # asked for every task's: refused, nothing started
        run_demo(run.config(tasks=["click-test", "click-link"], cold_start_demos=5), run.settings())


def test_the_task_queue_is_topped_up_between_progress_lines(monkeypatch, tmp_path, capsys):
    run = Run(monkeypatch, tmp_path)
    sent: list[int] = []
    inherited = signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # as from a terminal: the demo installs its own handler

    def send(settings, specs):
        sent.append(len(specs))
        if len(sent) == 3:  # the first fill and two refills: the run ends by count, not by the clock
            os.kill(os.getpid(), signal.SIGTERM)
        return len(specs)

    monkeypatch.setattr(phases, "send_tasks", send)
    monkeypatch.setattr(demo, "FEED_TICK_S", 0.05)
    try:
        run_demo(run.config(minutes=1.0, progress_s=120.0), run.settings())
    finally:
        signal.signal(signal.SIGTERM, inherited)
    assert "episodes 0 |" not in capsys.readouterr().out, "no progress line within the run"
    assert sent == [64, 64, 64], sent  # refilled at the ticks (nothing consumed the tasks), long before a progress line


def test_options_the_trainer_or_cloning_would_refuse_fail_before_anything_starts(monkeypatch, tmp_path):
    for name in [k for k in os.environ if k.startswith("FLYWHEEL_")]:
        monkeypatch.delenv(name)
    run = Run(monkeypatch, tmp_path)
    refused = {  # each failed only when its phase began, minutes into the run
        "RFT rounds": (dict(trainer_args="--nproc-per-node 2"), "rft_every works for a kind with RFT rounds"),
        "misspelt": (dict(trainer_args="--lam-polcy 0.9"), "unrecognized arguments: --lam-polcy"),
        "ambiguous": (dict(trainer_args="--he 2"), "ambiguous option: --he"),  # --help or --head-lr-mult
        "bad value": (dict(trainer_args="--epochs x"), "epochs='x' from arguments: invalid literal"),
        "bad setting": (dict(trainer_args="--metrics-port abc"), "metrics_port"),
        "cloning": (dict(bc_args="--epochs -1"), "epochs, minibatch_size and lr >= 0"),
        "bad JSON": (dict(trainer_args="--policy-config {grid:"), "policy_config"),
        "bad JSON, cloning": (dict(bc_args="--policy-config [1]"), "policy_config"),
        "noise": (dict(demo_noise=1.0), r"--demo-noise is a chance per step in \[0, 1\)"),
        "noise, no cold start": (dict(demo_noise=0.1, cold_start_demos=0), "needs --demos-from scripted"),
        # DAgger set for the trainer alone: the workers would go on labelling (or never start)
        "DAgger off in the trainer": (dict(expert_coef=1.0, dagger_every=2, trainer_args="--dagger-every 0"),
                                      "give --dagger-every to the demo itself"),
        "abbreviated": (dict(expert_coef=1.0, trainer_args="--expert=0.5"), "give --expert-coef to the demo itself"),
        "DAgger on in the trainer": (dict(trainer_args="--expert-coef 1 --dagger-every 3"),
                                     "give --expert-coef and --dagger-every to the demo itself"),
    }
    # a variable the child reads counts as its options do (one no layer above the environment sets:
    # after a cold start the kind's layer sets epochs, and it sits above FLYWHEEL_EPOCHS)
    monkeypatch.setenv("FLYWHEEL_MINIBATCH_SIZE", "0")
    with pytest.raises(UserError, match="minibatch_size"):
        run_demo(run.config(), run.settings())
    monkeypatch.delenv("FLYWHEEL_MINIBATCH_SIZE")
    for name, (options, message) in refused.items():
        with pytest.raises(UserError, match=message):
            run_demo(run.config(**options), run.settings())
        assert not run.children and not run.broker.stopped, name  # nothing was started
    # the user's options come last and win, as in the child: no RFT rounds, so two ranks are fine
    run_demo(run.config(trainer_args="--rft-every 0 --nproc-per-node 2"), run.settings())
    assert run.children and run.broker.stopped and run.all_stopped()
    # from random weights the demo sets no RFT rounds, and does not clone: both are accepted
    run.children, run.broker.stopped, run.published = [], False, iter([False])
    run_demo(run.config(trainer_args="--nproc-per-node 2", bc_args="--epochs -1", cold_start_demos=0), run.settings())
    assert run.children and run.broker.stopped and run.all_stopped()


def test_a_run_under_nohup_keeps_ignoring_sighup():
    before = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        assert signal.SIGHUP not in demo.stop_signals()
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
        assert signal.SIGHUP in demo.stop_signals()
    finally:
        signal.signal(signal.SIGHUP, before)


def test_a_second_ctrl_c_or_sigterm_lets_the_stopping_finish(capsys):
    for first, raised in ((signal.SIGINT, KeyboardInterrupt), (signal.SIGTERM, demo.Terminated)):
        stop = phases.Stop()
        handler = demo._terminate_once(stop)
        with pytest.raises(raised):
            handler(first, None)
        assert stop.is_set() and stop.reason == ("stopped by Ctrl-C" if first == signal.SIGINT else "stopped by SIGTERM")
        for again in (signal.SIGINT, signal.SIGTERM):  # a second Ctrl-C, or a supervisor's SIGTERM after it
            handler(again, None)  # does not raise into the cleanup
    assert "already stopping" in capsys.readouterr().out
    stop.interruptible = True  # the processes are stopped, the report is being written: it may be skipped
    with pytest.raises(KeyboardInterrupt):
        handler(signal.SIGINT, None)
    handler(signal.SIGINT, None)  # once: the final stop (broker) is not interrupted


def test_a_run_without_an_rl_update_says_so_and_exits_non_zero(monkeypatch, tmp_path, capsys):
    run = Run(monkeypatch, tmp_path)  # the trainer starts from v1 and publishes nothing past it
    path = run_demo(run.config(), run.settings())
    assert any("NO RL UPDATE" in n for n in run.reports[0].notes) and "NO RL UPDATE" in capsys.readouterr().out
    assert demo_report.exit_code(path) == phase_list.NO_RL_UPDATE
    run = Run(monkeypatch, tmp_path / "again")
    monkeypatch.setattr(demo, "snapshot", lambda settings, policy, prefix: {"published": 2})  # PPO's first version
    path = run_demo(run.config(), run.settings())
    assert not any("NO RL UPDATE" in n for n in run.reports[0].notes) and demo_report.exit_code(path) == 0


def test_the_runs_resolved_configuration_is_in_its_folder_and_report(monkeypatch, tmp_path):
    run = Run(monkeypatch, tmp_path)
    path = run_demo(run.config(tasks=["games"], target_kl=0.05, cold_start_demos=2, bc_args="--epochs 3"),
                    run.settings())
    written = json.loads((path.parent / "config.json").read_text())
    assert written == json.loads(json.dumps(run.reports[0].config, default=str))  # the report's, the same
    assert written["run_config"]["trainer"]["target_kl"] == 0.05 and written["resolved"]["target_kl"] == 0.05
    assert written["run_config"]["trainer_origins"]["minibatch_size"] == "suite"
    assert written["bc"]["epochs"] == 3 and written["bc"]["lr"] == 1e-3  # the user's epochs, the suite's rate
    # the code it ran: this checkout's commit (None outside a git checkout), so a figure names its code
    assert set(written["code"]) == {"commit", "dirty"} and isinstance(written["code"]["dirty"], list)
    assert written["code"]["commit"] is None or len(written["code"]["commit"]) == 40
