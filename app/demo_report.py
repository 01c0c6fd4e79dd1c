"""What a `flywheel demo` run says of itself: its header (the phases it will run, what teaches
it), its record (``config.json``: the demo's options, what the automatic ones came to, the
trainer's resolved configuration and where each field was set), whether it made an RL update
(``outcome.json``, read back for the exit code) and, once its processes are stopped, its report
(app.report, with app.measures' phase section)."""

from __future__ import annotations

import json
import logging
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any, Protocol

from app import measures, phase_list, phases, run_config, taught
from app.provenance import checkout_state
from app.demo_children import child_env, trainer_config
from app.demo_config import DemoConfig
from infra.runtime.config import describe
from infra.runtime.cpu_share import CpuShare
from infra.runtime.settings import Settings
from producers.capacity import machine_sandboxes
from producers.suites import RunPlan

log = logging.getLogger("flywheel.demo")


class Learned(Protocol):
    """What the report reads of the run's learner (``app.demo.Learner``)."""

    base_version: int  # the version the trainer started from
    dpo_version: int | None  # DPO's, where its phase published one
    cpu: CpuShare  # each process's share of the CPU from RL's first task on


def header(cfg: DemoConfig, run_id: str, policy: str, plan: RunPlan, train: Any, budget: phase_list.Budget,
           logs: Path, taught_by: taught.Taught) -> str:
    """The run's first lines: its mode, policy, tasks, its phases as ``train`` (the trainer's
    resolved config) runs them, its minutes, where its logs go, and what teaches it."""
    tasks = list(plan.tasks)
    cold_start = cfg.cold_start_demos > 0
    dpo_s = cfg.dpo_span_s()
    return (f"Flywheel demo {run_id}: mode {'sync' if cfg.sync else 'async'}, policy {policy}, {len(tasks)} tasks "
            f"({', '.join(tasks)}), step budget {plan.max_steps}, phases: "
            f"{'cold start' if cold_start else ''}"
            f"{f' ({cfg.demo_noise:.0%} mistakes)' if cold_start and cfg.demo_noise else ''}"
            f"{' -> SFT -> ' if cold_start else ''}{'value pretraining -> ' if cfg.value_pretrain_batches else ''}"
            f"PPO{f' (RFT every {train.rft_every} updates)' if train.rft_every else ''}"
            f"{f' (epochs stop at KL {train.target_kl:g})' if train.target_kl else ''}"
            f"{f' (self-imitation x {train.sil_coef:g})' if train.sil_coef else ''}"
            f"{f' (exploration floor {cfg.explore:g})' if cfg.explore > 0 else ''}"
            f"{f' (expert labels x {train.expert_coef:g})' if train.expert_coef else ''}"
            f"{f' (DAgger every {train.dagger_every} updates)' if train.dagger_every else ''}"
            f"{f' -> DPO (last {dpo_s / 60:g} min)' if dpo_s else ''}; {cfg.minutes:g} min"
            f"{f' (the cold start ends by {budget.deadline(phases.COLD_START) - budget.t0:.0f} s, SFT by {budget.deadline(phases.SFT) - budget.t0:.0f} s)' if cold_start else ''}"
            f"; logs in {logs}\n{taught.line(taught_by)}")


def in_checkout(path: str, root: Path) -> str:
    """``path`` relative to the checkout ``root`` where it lies inside it (a report committed to
    docs/ then names no folder of the machine it ran on), else as given."""
    if not path:
        return path
    try:
        return str(Path(path).resolve().relative_to(root))
    except ValueError:
        return path


def record(cfg: DemoConfig, settings: Settings, prefix: str, policy: str, plan: RunPlan, cold: phases.ColdStart,
           trainer: run_config.Resolved, taught_by: taught.Taught) -> dict:
    """The run's ``config.json``: the demo's options, what its automatic ones came to (``resolved``),
    the trainer's configuration with each field's layer, what taught it, the platform settings and,
    with a cold start, the cloning's configuration as `flywheel bc` will resolve it (SFT may cut
    its epochs to its share); and the code it ran (``code``: the checkout's commit and the tracked
    files changed since, app.provenance; a run is reproducible from the commit it names)."""
    root = Path(__file__).resolve().parents[1]
    config = {"demo": {**asdict(cfg), "report_dir": in_checkout(cfg.report_dir, root)},
              "resolved": resolved(cfg, trainer.train), "run_config": trainer.record(),
              "taught_by": taught.record(taught_by), "settings": describe(settings), "code": checkout_state(root)}
    if cfg.cold_start_demos > 0:
        config["bc"] = describe(run_config.bc_config(phases.bc_options(cfg, policy, list(cold.demonstrated),
                                                                       plan.action_types),
                                                     {**os.environ, **child_env(settings, prefix)}))
    return config


def resolved(cfg: DemoConfig, train: Any = None) -> dict[str, float]:
    """What the run's automatic settings (-1 or 0 in the config) came to, for its report: those of
    the trainer as it runs (``train``, the resolved TrainConfig; by default this run's, resolved
    here), whichever layer set them (the kind, the suite, the user)."""
    if train is None:
        train = trainer_config(cfg, "demo-x.", f"{cfg.policy_kind}-x", cfg.plan()).train
    return {"ppo_lr": train.lr, "rft_every": train.rft_every, "target_kl": train.target_kl, "explore": cfg.explore,
            "sandboxes_per_worker": cfg.sandboxes or machine_sandboxes(cfg.workers)}


def rl_outcome(base_version: int, snap: dict, out: Path) -> str:
    """Whether the run made an RL update (the trainer published a version past ``base_version``,
    by ``snap``, the last reading), kept in ``<out>/outcome.json`` for `flywheel demo`'s exit
    code; -> the line saying it made none, or ''."""
    published = snap.get("published")
    line = phase_list.rl_update_line(base_version, published)
    try:
        (out / OUTCOME).write_text(json.dumps({"rl_update": not line, "base_version": base_version,
                                               "published": published}) + "\n")
    except OSError as exc:  # the line still says it; the exit code cannot
        log.warning("could not write %s: %s", out / OUTCOME, exc)
    return line


OUTCOME = "outcome.json"  # in the run's folder: whether the run made an RL update


def exit_code(report: Path) -> int:
    """`flywheel demo`'s exit code from the run's folder: ``phase_list.NO_RL_UPDATE`` when it made no RL update."""
    try:
        outcome = json.loads((report.parent / OUTCOME).read_text())
    except (OSError, ValueError):
        return 0
    return 0 if outcome.get("rl_update", True) else phase_list.NO_RL_UPDATE


def write(settings: Settings, cfg: DemoConfig, run: Any, out: Path, learner: Learned, clock: phases.PhaseClock,
          taught_by: taught.Taught) -> Path:
    """The run's report in ``out`` (``run``: its app.report.RunInfo, whose notes get a line where
    the phase section could not be computed: the rest of the report still helps) -> its path."""
    # local: loads Pillow, clickhouse-connect, needed only on this path
    from app.report import write_report

    extra, data = [], {}
    try:
        extra, data = measures.report_section(settings, run.policy, learner.base_version, cfg.cold_start,
                                              cfg.value_pretrain_batches > 0, clock, learner.dpo_version, taught_by)
    except Exception as exc:  # noqa: BLE001 - the rest of the report still helps
        run.notes.append(f"the phase section could not be computed: {exc}")
    return write_report(settings, run, out, extra + [learner.cpu.markdown()], extra_summary=data)
