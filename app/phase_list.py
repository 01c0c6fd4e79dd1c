"""The main job's phases, declared once: what each is, when it starts, when it is done, the share
of the run's ``--minutes`` it may take, what it reports, and what runs it. ``run_phases`` steps
through them in one loop: a phase that ``applies`` to the run runs a blocking ``step`` (the cold
start, SFT), or ``begin``s and then ``tick``s on each of the learner's readings until it is done,
its deadline passes or the run stops (``phases.Stop``). Adding or reordering a phase is an edit of
``PHASES``, not of the loop.

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
from typing import Any, Protocol

from app import phases
from app.phases import COLD_START, DPO, PPO, SFT, VALUE_PRETRAIN
from app.run_config import VALUE_PRETRAIN_SHARE, bc_config
from infra.runtime.settings import Settings
from producers.suites import RunPlan


class Learner(Protocol):
    """The trainer's half of the run as the phases the trainer runs drive it (``app.demo.Learner``)."""

    base_version: int  # the version the trainer started from (pi_sft after a cold start)

    def start(self) -> str:
        """Start the trainer (awaited until it published), the rollout workers and the task feed,
        once; -> what the trainer starts from ('' when it already runs)."""

    def tick(self) -> dict | None:
        """One tick: the task feed topped up; every progress interval a reading (the children
        checked, the progress line printed), else None."""

    def dpo(self) -> None:
        """PPO stopped for good and DPO of pi_sft run; the workers then act with its version."""


@dataclass
class Ctx:
    """What a phase reads and writes: the run's resolved config (``cfg``, a DemoConfig after
    ``effective``), its settings, names and plan; ``stop`` says whether and why the run stops
    early; ``learner``: the trainer's half of the run, for the phases it runs."""

    cfg: Any
    settings: Settings
    env: dict[str, str]
    prefix: str
    policy: str
    plan: RunPlan
    cold: Any  # phases.ColdStart
    logs: Path
    clock: phases.PhaseClock
    stop: phases.Stop
    human: list | None = None  # --demos-from human: the people's demonstrations
    notes: list[str] = field(default_factory=list)
    learner: Learner | None = None


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
    if ctx.stop.is_set():
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
                 epochs=None if epochs == asked else epochs, timeout_s=seconds, train_budget_s=sft_train_budget(seconds))


def has_cold_start(ctx: Ctx) -> bool:
    return bool(ctx.cold.per_task)


def has_value_pretraining(ctx: Ctx) -> bool:
    return ctx.cfg.value_pretrain_batches > 0


def always(ctx: Ctx) -> bool:
    return True


def dpo_span(ctx: Ctx) -> float:
    """Seconds of DPO at the run's end (0: no DPO phase)."""
    return ctx.cfg.dpo_span_s()


def has_dpo(ctx: Ctx) -> bool:
    return dpo_span(ctx) > 0


def learning_begins(ctx: Ctx, p: "Phase", deadline: float) -> None:
    """A phase the trainer runs begins with the learner running (started by the first of them)."""
    ctx.clock.enter(p.name, ctx.learner.start())


def value_pretrained(ctx: Ctx, reading: dict) -> bool:
    """Value pretraining is done once the trainer published past the version it started from
    (a failed reading says nothing)."""
    return phases.current_phase(reading.get("published"), ctx.learner.base_version, True) == PPO


def ppo_tick(ctx: Ctx, reading: dict) -> bool:
    """PPO notes its updates and newest version; it runs to its deadline."""
    if "published" in reading:
        ctx.clock.note(f"{reading['updates']} trainer updates (critic-only ones included), "
                       f"newest version v{reading['published']}")
    return False


def dpo_begins(ctx: Ctx, p: "Phase", deadline: float) -> None:
    ctx.learner.dpo()


def to_the_end(ctx: Ctx, reading: dict) -> bool:
    """DPO's version acts until the run's end."""
    return False


@dataclass(frozen=True)
class Phase:
    """One phase of the main job, as the demo and its report name it, and what runs it: a blocking
    ``step`` (to its deadline), or the trainer (``begin``, then ``tick`` at each of the learner's
    readings: done or not)."""

    name: str
    ends_by: float  # the share of --minutes from the run's start by which it ends (1: the run's end)
    starts: str
    done: str
    reports: str
    applies: Callable[[Ctx], bool] = always  # whether this run has the phase
    step: Callable[[Ctx, float], None] | None = None  # runs it, blocking, before the learner starts
    begin: Callable[[Ctx, "Phase", float], None] | None = None
    tick: Callable[[Ctx, dict], bool] | None = None
    span: Callable[[Ctx], float] | None = None  # seconds it takes at the run's end (earlier phases end before)


PHASES: tuple[Phase, ...] = (
    Phase(COLD_START, 0.3, "once the platform is up, when a task has a demonstrator",
          "every demonstration asked is scored, or 90% and 30 s without another, or its deadline",
          "demonstrations scored of those asked", has_cold_start, step=cold_start_step),
    Phase(SFT, 0.55, "after the cold start", "`flywheel bc` published pi_sft; its epochs are cut to end by "
          "its deadline (``sft_epochs``), where it is stopped at the latest",
          "the clone's summary line: steps, loss, greedy match", has_cold_start, step=sft_step),
    Phase(VALUE_PRETRAIN, 1.0, "when the trainer starts from pi_sft (off from random weights)",
          f"the critic converged, its batches are spent, or {VALUE_PRETRAIN_SHARE:.0%} of --minutes passed "
          "(the trainer's own bounds); the trainer publishes its first PPO version",
          "critic-only updates; the critic at PPO's start", has_value_pretraining, begin=learning_begins,
          tick=value_pretrained),
    Phase(PPO, 1.0, "at the trainer's first version past the one it started from",
          "the run's deadline less DPO's span, every task at its target (--until-target), or --until-version",
          "trainer updates and the newest version; the per-phase table", begin=learning_begins, tick=ppo_tick),
    Phase(DPO, 1.0, "for the last --dpo-minutes (the language policy's auto)",
          "`flywheel dpo` published its version, or the run ends", "the DPO version and its pairs", has_dpo,
          begin=dpo_begins, tick=to_the_end, span=dpo_span),
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


def run_phases(ctx: Ctx, budget: "Budget", steps: tuple[Phase, ...] | list[Phase] = PHASES) -> None:
    """The run: each phase of ``steps`` that applies to it, in order, from its start to its end or
    its deadline (``deadline``), until the run stops (``ctx.stop``). A phase the trainer runs checks
    the run's goal at each reading (``goal_reached``: it stops the run) and its own ``tick``."""
    for p in steps:
        if ctx.stop.is_set() or not p.applies(ctx):
            continue
        ends = deadline(ctx, budget, p)
        if p.step is not None:
            p.step(ctx, ends)
            continue
        p.begin(ctx, p, ends)
        while not ctx.stop.is_set() and time.time() < ends:
            reading = ctx.learner.tick()
            if reading is None:
                continue
            done = p.tick(ctx, reading)
            goal = goal_reached(ctx, reading, p.name, budget.t0)
            if goal:
                ctx.notes.append(goal)
                ctx.stop.set(goal)
            if done:
                break


def deadline(ctx: Ctx, budget: "Budget", p: Phase) -> float:
    """When ``p`` must end: by its share of --minutes, and before the later phases of the run that
    take its last minutes (``span``: DPO's) begin."""
    later = PHASES[PHASES.index(p) + 1:]
    return min(budget.deadline(p.name), budget.end - sum(q.span(ctx) for q in later if q.span and q.applies(ctx)))


def goal_reached(ctx: Ctx, reading: dict, name: str, t0: float) -> str:
    """The run's goal at a reading of phase ``name``: '' or the line saying it was reached (every
    task at its target with --until-target; PPO's --until-version versions published; every task's
    --until-episodes episodes ended)."""
    cfg, minutes = ctx.cfg, (time.time() - t0) / 60
    if cfg.until_target and reached_targets(reading, list(ctx.plan.tasks)):
        return f"every task reached its target after {minutes:.1f} min"
    if reached_version(cfg.until_version, reading, ctx.learner.base_version, name):
        return f"PPO published v{reading['published']} after {minutes:.1f} min (--until-version {cfg.until_version})"
    if reached_episodes(cfg.until_episodes, reading, list(ctx.plan.tasks)):
        return f"every task ended {cfg.until_episodes} episodes after {minutes:.1f} min (--until-episodes)"
    return ""


def reached_episodes(n: int, snap: dict, tasks: list[str]) -> bool:
    """``--until-episodes``: every task has at least ``n`` ended episodes in the reading (its
    last-100 window); 0 never stops the run."""
    rates = snap.get("rates", {})
    return n > 0 and all(t in rates and rates[t][1] >= n for t in tasks)


def reached_targets(snap: dict, tasks: list[str]) -> bool:
    # local: loads matplotlib, needed only on this path (the demo running, not its --help)
    from app.report import TARGETS

    rates = snap.get("rates", {})
    return all(t in rates and rates[t][1] >= 100 and rates[t][0] >= TARGETS.get(t, 0.9) for t in tasks)


def reached_version(until_version: int, snap: dict, base_version: int, phase: str) -> bool:
    """``--until-version``: PPO (not a critic-only update) published ``until_version`` versions
    past ``base_version``, the one the trainer started from, and a rollout step acted with one of
    them is stored. 0 never stops the run."""
    published, acting = snap.get("published"), snap.get("acting")
    return (until_version > 0 and phase == PPO and published is not None and acting is not None
            and published >= base_version + until_version and acting > base_version)


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


def sft_train_budget(seconds: float) -> float:
    """Seconds of training `flywheel bc` may start epochs in, out of SFT's ``seconds``: less its start
    and a margin for the epoch that runs past the budget and for publishing pi_sft (a quarter of the
    rest, 15 s at least), 10 s at least. The epochs' estimate (``sft_epochs``) can be off (a kind, a
    machine, the demonstrations' count read while the sink catches up); this bound is not."""
    trainable = seconds - BC_START_S
    return max(10.0, trainable - max(15.0, 0.25 * trainable))


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
