"""Self-imitation's replay (trainer.rl.self_imitation): the policy's own best episodes across
versions, per task, filled from the batches PPO trains on; and the learner's collaborator that
fills it, draws each update's replayed steps and keeps the entropy band (``SelfImitation``).

Per task it keeps at most ``per_task`` episodes, ranked: successes first, the newest of them
first (a task judged by its end: the newest successes are the closest to today's policy), then
episodes that earned a positive return without succeeding (a game's score), the highest first.
An episode that neither succeeded nor earned a positive return never enters. The whole replay
holds at most ``max_steps`` steps (their preprocessed inputs are the memory it takes): when full,
the task holding the most steps gives up its lowest-ranked episode.

Each step carries a priority, its last measured clipped advantage (R - V)+; a step never
evaluated takes the largest priority held, so a new success is replayed at once (prioritised
replay's convention). Sampling draws steps with probability proportional to
(priority + ``PRIORITY_EPS``) ** ``PRIORITY_ALPHA``, with replacement.

The replay lives in the trainer's memory (the checkpoint does not hold the screenshots). Before
the learner's first update it is seeded from flywheel.sft.v1, the durable log of V(s) = 1
trajectories that RFT rounds read too (``own_successes``: RFT's choice, per task the newest, of the
policy's own only: the annotator's demonstrations would be a teacher during RL), so a restart
finds the successes of the runs before it; what has no success there (a game's best returns)
comes back with the next batches. A seed that fails is logged and the replay fills from the batches.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
from dataclasses import dataclass
from typing import Callable

import torch

from infra.runtime.settings import Settings
from schemas.blobs import BlobNotFound, BlobStore
from trainer.core import metric_names as M
from trainer.rl.config import TrainConfig
from trainer.rl.intake import to_episode
from trainer.rl.self_imitation import SILSample, adapt_ent_coef, returns_to_go
from trainer.rl.state import PPOState
from trainer.rl.update import EpisodeSample, stack_inputs
from trainer.sft.rft import select_rft

log = logging.getLogger("flywheel.trainer")
STAGE = "sil"  # the stage that dead-letters an undecodable record of the sft topic while seeding
SEED_TIMEOUT_S = 30.0  # reading the sft topic's snapshot at the first update

PRIORITY_ALPHA = 0.6  # how sharply priorities skew sampling (prioritised replay's and SIL's value)
PRIORITY_EPS = 0.01  # a step whose advantage was 0 still comes back now and then: V moves


@dataclass
class Kept:
    """One replayed episode: its steps, their returns-to-go and priorities."""

    key: int  # arrival order: larger is newer
    task: str
    success: bool
    episode_return: float
    inputs: list  # [T] per-step policy inputs (EpisodeSample.images)
    instructions: list[str]
    actions: list
    returns: list[float]  # [T] R_t
    priority: torch.Tensor  # [T]

    def rank(self) -> tuple:
        """Larger is kept first: successes, newest first; then the others, highest return first."""
        return (True, 0.0, self.key) if self.success else (False, self.episode_return, self.key)


class SuccessReplay:
    """add: the batch's worthy episodes; sample: steps for an update; reprioritise: read back
    the update's clipped advantages."""

    def __init__(self, per_task: int, max_steps: int, gamma: float) -> None:
        self.per_task, self.max_steps, self.gamma = per_task, max_steps, gamma
        self.tasks: dict[str, list[Kept]] = {}  # per task, best first
        self._keys = itertools.count()

    def steps(self) -> int:
        return sum(len(k.actions) for kept in self.tasks.values() for k in kept)

    def episodes(self) -> int:
        return sum(len(kept) for kept in self.tasks.values())

    def add(self, batch: list[EpisodeSample]) -> int:
        """Keep ``batch``'s successes and positive-return episodes within the bounds -> how many
        of them are still held afterwards."""
        top = self._top_priority()
        added = []
        for e in batch:
            ret = float(sum(e.rewards))
            if not (e.success or ret > 0):
                continue
            kept = Kept(next(self._keys), e.task, e.success, ret, list(e.images), list(e.instructions),
                        list(e.actions), returns_to_go(e.rewards, self.gamma), torch.full((len(e.actions),), top))
            added.append(kept)
            task = self.tasks.setdefault(e.task, [])
            task.append(kept)
            task.sort(key=Kept.rank, reverse=True)
            del task[self.per_task:]
        self._bound()
        held = {id(k) for kept in self.tasks.values() for k in kept}
        return sum(id(k) in held for k in added)

    def _top_priority(self) -> float:
        held = [float(k.priority.max()) for kept in self.tasks.values() for k in kept if len(k.actions)]
        return max(held, default=1.0)

    def _bound(self) -> None:
        """Drop lowest-ranked episodes of the task holding the most steps until the steps fit."""
        total = self.steps()
        while total > self.max_steps:
            task = max(self.tasks, key=lambda t: sum(len(k.actions) for k in self.tasks[t]))
            dropped = self.tasks[task].pop()
            total -= len(dropped.actions)
            if not self.tasks[task]:
                del self.tasks[task]

    def sample(self, n: int, generator: torch.Generator | None = None) -> SILSample | None:
        """``n`` steps drawn by priority, with replacement; None when the replay is empty."""
        held = [k for kept in self.tasks.values() for k in kept]
        if not held or n < 1:
            return None
        weights = torch.cat([(k.priority + PRIORITY_EPS) ** PRIORITY_ALPHA for k in held])
        where = [(k, t) for k in held for t in range(len(k.actions))]
        picked = [where[i] for i in torch.multinomial(weights, n, replacement=True, generator=generator).tolist()]
        return SILSample(inputs=stack_inputs([k.inputs[t] for k, t in picked]),
                         instructions=[k.instructions[t] for k, t in picked],
                         actions=[k.actions[t] for k, t in picked],
                         returns=torch.tensor([k.returns[t] for k, t in picked], dtype=torch.float32),
                         keys=[(k.key, t) for k, t in picked], replay_steps=len(where), replay_episodes=len(held))

    def reprioritise(self, sample: SILSample) -> None:
        """Each evaluated step of ``sample`` still held takes its measured (R - V)+ as its priority."""
        by_key = {k.key: k for kept in self.tasks.values() for k in kept}
        for (key, t), adv in zip(sample.keys, sample.clipped.tolist()):
            if key in by_key and adv == adv:  # NaN: the update did not reach it
                by_key[key].priority[t] = adv


class SelfImitation:
    """The PPO learner's collaborator for self-imitation and the entropy band: ``config`` is the
    configuration of the next update (its entropy coefficient as the band left it in the state),
    ``before_update`` fills the replay with the batch and draws the update's replayed steps (None
    when off, empty, or critic-only), ``after_update`` reads back their priorities and moves the
    coefficient (``PPOState.ent_coef``, its one writer)."""

    def __init__(self, cfg: TrainConfig, seed: Callable[[], list[EpisodeSample]] | None = None) -> None:
        self.cfg = cfg
        self.replay = SuccessReplay(cfg.sil_per_task, cfg.sil_max_steps, cfg.gamma) if cfg.sil_coef > 0 else None
        self.seed = seed if self.replay is not None else None  # called once, before the first update

    def _seed(self) -> None:
        seed, self.seed = self.seed, None
        try:
            held = self.replay.add(seed())
        except Exception as exc:  # noqa: BLE001 - as a failed RFT round: PPO goes on, the batches refill the replay
            log.warning("self-imitation: seeding the replay from the sft topic failed, it fills from the batches: %s", exc)
            return
        log.info("self-imitation: %d of the policy's own successes seeded the replay", held)

    def config(self, state: PPOState) -> TrainConfig:
        # with the band off (a restart with ent_floor 0) a coefficient it left in the state is stale
        if state.ent_coef is None or state.ent_coef == self.cfg.ent_coef or self.cfg.ent_floor <= 0:
            return self.cfg
        return dataclasses.replace(self.cfg, ent_coef=state.ent_coef)

    def before_update(self, batch: list[EpisodeSample], critic_only: bool) -> SILSample | None:
        if self.replay is None:
            return None
        if self.seed is not None:
            self._seed()
        self.replay.add(batch)  # a rare success is replayed in the very update that brought it
        return None if critic_only else self.replay.sample(self.cfg.sil_batch)

    def after_update(self, sample: SILSample | None, state: PPOState, metrics: dict[str, float],
                     critic_only: bool) -> dict[str, float]:
        """-> the coefficient the update used (``train/ent_coef``); the next one is in ``state``."""
        if sample is not None:
            self.replay.reprioritise(sample)
        used = self.config(state).ent_coef
        if not critic_only and self.cfg.ent_floor > 0:
            cfg = self.cfg
            state.ent_coef = adapt_ent_coef(used, metrics.get(M.ENTROPY, float("nan")), cfg.ent_coef, cfg.ent_floor,
                                            cfg.band_ceiling())
        return {M.ENT_COEF: used}


def own_successes(settings: Settings, store: BlobStore, policy, cfg: TrainConfig,
                  timeout_s: float = SEED_TIMEOUT_S) -> list[EpisodeSample]:
    """The policy's own successes on flywheel.sft.v1 as training data: RFT's choice
    (trainer.sft.rft.select_rft: per task the newest ``sil_per_task``, as ``cfg.scorer`` judged
    them) less the annotator's demonstrations; one this policy cannot represent or whose
    screenshots are gone is left out."""
    # local: as an RFT round's, the reader loads trainer.sft.bc, needed only on this path
    from trainer.sft.bc import read_sft

    chosen = [s for s in select_rft(read_sft(settings, STAGE, timeout_s), cfg.policy_name, cfg.sil_per_task, cfg.scorer)
              if s.trajectory.policy == cfg.policy_name]
    out = []
    for scored in chosen:
        try:
            out.append(to_episode(scored, policy, store))
        except (ValueError, BlobNotFound):
            continue
    return out
