"""The main job's phases, declared once: what each is, when it starts, when it is done, the share
of the run's ``--minutes`` it may take, and what it reports. ``app.demo`` steps through them;
adding or reordering a phase is an edit of ``PHASES`` (and of the step that runs it), not of a
chain of tests on child names.

``--minutes`` bounds the whole run, from its first line: each phase ends by its deadline
(``Budget``), the cold start and SFT by theirs at the latest (their shares are cumulative upper
bounds: what one leaves unused goes to the next), so PPO keeps at least ``PPO_FLOOR`` of the run.
A run whose trainer never published a version past its start made no RL update: it says so on
its last line and in its report, and `flywheel demo` exits non-zero (``NO_RL_UPDATE``).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app import phases
from app.phases import COLD_START, DPO, PPO, SFT, VALUE_PRETRAIN
from app.run_config import VALUE_PRETRAIN_SHARE, bc_config
from infra.runtime.settings import Settings
from producers.suites import RunPlan


@dataclass
class Ctx:
    """What a phase's step reads and writes: the run's resolved config (``cfg``, a DemoConfig after
    ``effective``), its settings, names and plan; ``stop`` is the signal handlers' flag."""

    cfg: Any
    settings: Settings
    env: dict[str, str]
    prefix: str
    policy: str
    plan: RunPlan
    cold: Any  # phases.ColdStart
    logs: Path
    clock: phases.PhaseClock
    stop: dict
    human: list | None = None  # --demos-from human: the people's demonstrations
    notes: list[str] = field(default_factory=list)


def cold_start_step(ctx: Ctx, deadline: float) -> None:
    """The demonstrations: the people's copied, or the scripted annotator's played until
    ``deadline``; the tasks it left unplayed are skipped for the RL workers."""
    tasks = list(ctx.cold.demonstrated)
    if ctx.human is not None:  # recorded by people beforehand
        phases.import_demonstrations(ctx.settings, ctx.human, tasks, ctx.clock)
        return
    done = phases.demonstrate(ctx.cfg, ctx.settings, ctx.env, ctx.prefix, ctx.policy, tasks, ctx.plan.max_steps,
                              ctx.logs, ctx.clock, ctx.stop, deadline=deadline)
    ctx.clock.note(f"{done} scripted episodes scored ({ctx.cfg.cold_start_demos} per task asked)")
    if ctx.stop["flag"]:
        return
    try:
        phases.skip_leftover_tasks(ctx.settings, f"{ctx.prefix}rollout")
    except Exception as exc:  # noqa: BLE001 - a killed annotator's membership may linger
        ctx.notes.append(f"leftover demonstration tasks not skipped ({exc}): RL workers may play some")


def sft_step(ctx: Ctx, deadline: float) -> None:
    """`flywheel bc` into pi_sft, its epochs cut to end by ``deadline`` (``sft_epochs``) and
    stopped there at the latest (a minute at least)."""
    tasks = list(ctx.cold.demonstrated)
    argv = phases.bc_options(ctx.cfg, ctx.policy, tasks, ctx.plan.action_types)
    asked = bc_config(argv, {**os.environ, **ctx.env}).epochs_for(ctx.cfg.policy_kind)
    try:
        steps = phases.demonstration_steps(ctx.settings, ctx.policy)
    except Exception:  # noqa: BLE001 - unknown: the deadline alone bounds it
        steps = 0
    seconds = max(deadline - time.time(), 60.0)
    epochs = sft_epochs(asked, steps, seconds)
    if epochs < asked:
        ctx.notes.append(f"SFT: {epochs} epochs of the {asked} asked, to end within its share of --minutes "
                         f"({seconds:.0f} s for {steps} demonstration steps)")
    phases.clone(ctx.cfg, ctx.env, ctx.policy, tasks, ctx.plan.action_types, ctx.logs, ctx.clock,
                 epochs=None if epochs == asked else epochs, timeout_s=seconds)


@dataclass(frozen=True)
class Phase:
    """One phase of the main job, as the demo and its report name it."""

    name: str
    ends_by: float  # the share of --minutes from the run's start by which it ends (1: the run's end)
    starts: str
    done: str
    reports: str
    # runs it, blocking, before the learner starts (None: the trainer runs it, and the demo's
    # progress loop sees it begin and end); called only on a run with a cold start
    step: Callable[[Ctx, float], None] | None = None


PHASES: tuple[Phase, ...] = (
    Phase(COLD_START, 0.3, "once the platform is up, when a task has a demonstrator",
          "every demonstration asked is scored, or 90% and 30 s without another, or its deadline",
          "demonstrations scored of those asked", cold_start_step),
    Phase(SFT, 0.55, "after the cold start", "`flywheel bc` published pi_sft; its epochs are cut to end by "
          "its deadline (``sft_epochs``), where it is stopped at the latest",
          "the clone's summary line: steps, loss, greedy match", sft_step),
    Phase(VALUE_PRETRAIN, 1.0, "when the trainer starts from pi_sft (off from random weights)",
          f"the critic converged, its batches are spent, or {VALUE_PRETRAIN_SHARE:.0%} of --minutes passed "
          "(the trainer's own bounds); the trainer publishes its first PPO version",
          "critic-only updates; the critic at PPO's start"),
    Phase(PPO, 1.0, "at the trainer's first version past the one it started from",
          "the run's deadline less DPO's span, every task at its target (--until-target), or --until-version",
          "trainer updates and the newest version; the per-phase table"),
    Phase(DPO, 1.0, "for the last --dpo-minutes (the language policy's auto)",
          "`flywheel dpo` published its version, or the run ends", "the DPO version and its pairs"),
)
PPO_FLOOR = 1.0 - max(p.ends_by for p in PHASES if p.ends_by < 1.0)  # the least of the run PPO keeps
NO_RL_UPDATE = 3  # `flywheel demo`'s exit code when the run ended without an RL update

# `flywheel bc`'s cost, to cut its epochs to SFT's share: the pixel policy on the games took 265 s
# for 1,955 steps x 40 epochs on 2 cores (docs/tasks.md, g31a: 3.4 ms a step-epoch), plus its start
# (imports, reading the demonstrations); the deadline stops a kind slower than that
BC_STEP_EPOCH_S = 3.4e-3
BC_START_S = 30.0


def phase(name: str) -> Phase:
    return next(p for p in PHASES if p.name == name)


def before_rl(ctx: Ctx, budget: "Budget") -> None:
    """Step through the phases that run before the learner starts (a cold start's), each to its
    deadline, until one is stopped."""
    if not ctx.cold.per_task:
        return
    for p in PHASES:
        if p.step is None or ctx.stop["flag"]:
            continue
        p.step(ctx, budget.deadline(p.name))


@dataclass(frozen=True)
class Budget:
    """The run's clock: it started at ``t0`` (epoch seconds) and has ``minutes``."""

    t0: float
    minutes: float

    @property
    def end(self) -> float:
        return self.t0 + self.minutes * 60

    def deadline(self, name: str) -> float:
        """When phase ``name`` must be done by."""
        return self.t0 + phase(name).ends_by * self.minutes * 60

    def left(self, name: str, now: float) -> float:
        """Seconds phase ``name`` has left at ``now`` (0 once past its deadline)."""
        return max(0.0, self.deadline(name) - now)


def sft_epochs(asked: int, steps: int, seconds: float) -> int:
    """The clone's epochs that fit in ``seconds`` over ``steps`` demonstration steps at
    ``BC_STEP_EPOCH_S`` (at most ``asked``, at least 1)."""
    if steps <= 0:
        return asked
    fit = math.floor((seconds - BC_START_S) / (steps * BC_STEP_EPOCH_S))
    return max(1, min(asked, fit))


def rl_update_line(base_version: int, published: int | None) -> str:
    """'' when the trainer published a version past ``base_version`` (an RL update, PPO's or
    DPO's); else the line that says the run made none (``published`` None: none was read)."""
    if published is not None and published > base_version:
        return ""
    seen = "no version was read" if published is None else f"the newest version is v{published}, the one it started from"
    return (f"NO RL UPDATE: the run ended before the trainer published a version past v{base_version} ({seen}); "
            "the figures are the starting policy's. Give more --minutes, or fewer demonstrations "
            "(--cold-start-demos)")
