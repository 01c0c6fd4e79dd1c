"""The rounds that follow a PPO update inside the same update, before its version is published:
rejection-sampling fine-tuning on flywheel.sft.v1 (trainer.sft.rft) every ``rft_every`` PPO
updates, then DAgger (trainer.sft.dagger) every ``dagger_every``. Being inside the update, the
learner's exactly-once guarantee covers them: a replay after a crash repeats the update and its
round. DAgger's aggregate of labelled steps lives in memory, though: a replayed round fits the
labels gathered since the restart only.

A round that fails is logged and counted, and the update is published without it: it would fail
again on restart, and PPO must go on. Critic-only updates (value pretraining) have no round, but
their batches' labelled steps join DAgger's aggregate (the states pi_sft reached).
"""

from __future__ import annotations

import logging
from typing import Callable

from infra.runtime.policy import policy_kind
from infra.runtime.settings import Settings
from schemas.blobs import BlobStore
from trainer.core import metric_names as M
from trainer.rl.config import TrainConfig
from trainer.rl.state import PPOState
from trainer.rl.update import EpisodeSample
from trainer.sft.dagger import LabelBuffer, dagger_round
from trainer.sft.rft import RFT_WINDOW, rft_round, solved_tasks

log = logging.getLogger("flywheel.trainer")


def remember_outcomes(state: PPOState, batch: list[EpisodeSample]) -> None:
    """Per task, the success of its last RFT_WINDOW trained episodes (RFT leaves out solved tasks)."""
    outcomes = state.task_outcomes
    for e in batch:
        outcomes[e.task] = (outcomes.get(e.task, []) + [int(e.success)])[-RFT_WINDOW:]


class Rounds:
    """``after_update``: the rounds due after one update, -> their metrics.

    ``count(fate)`` adds one to a running total and returns it (a failed round's)."""

    def __init__(self, cfg: TrainConfig, settings: Settings, store: BlobStore, policy,
                 count: Callable[[str], int]) -> None:
        self.cfg, self.settings, self.store, self.policy, self.count = cfg, settings, store, policy, count
        self.rft_inputs: dict = {}  # RFT rounds' step inputs by episode id: preprocessed once, not every round
        # DAgger's aggregate: the labelled steps of the episodes trained on (a restart begins a new one)
        self.labels = LabelBuffer(cfg.dagger_buffer) if cfg.dagger_every else None

    def after_update(self, batch: list[EpisodeSample], state: PPOState, critic_only: bool) -> dict[str, float]:
        metrics: dict[str, float] = {}
        if not critic_only and self.cfg.rft_every:
            metrics.update(self.rft(state))
        if self.labels is not None:
            metrics.update(self.dagger(batch, state, critic_only))
        return metrics

    def rft(self, state: PPOState) -> dict[str, float]:
        """Counts a PPO update; every ``rft_every``-th is followed by an RFT round."""
        state.ppo_updates += 1
        if state.ppo_updates % self.cfg.rft_every:
            return {}
        cfg = self.cfg
        try:
            return rft_round(self.policy, self.settings, self.store, cfg.policy_name, cfg.rft_per_task, cfg.rft_epochs,
                             cfg.rft_lr, seed=cfg.seed + state.ppo_updates, scorer=cfg.scorer,
                             cache=self.rft_inputs, solved=solved_tasks(state.task_outcomes, cfg.rft_solved))
        except Exception as exc:  # noqa: BLE001 - a failed round must not stop PPO (it would fail again on restart)
            failed = self.count("rft_failed")
            log.warning("RFT round after PPO update %d failed, PPO goes on without it: %s", state.ppo_updates, exc)
            return {M.RFT_FAILED_TOTAL: float(failed)}

    def dagger(self, batch: list[EpisodeSample], state: PPOState, critic_only: bool) -> dict[str, float]:
        """The batch's labelled steps join the aggregate; every ``dagger_every``-th PPO update is
        followed by a round that fits the policy to it."""
        for e in batch:
            self.labels.add(e.images, e.instructions, e.experts, e.task)
        if critic_only:
            return {}
        state.dagger_updates += 1
        if state.dagger_updates % self.cfg.dagger_every:
            return {}
        cfg = self.cfg
        try:
            return dagger_round(self.policy, self.labels, cfg.dagger_epochs, cfg.dagger_lr,
                                policy_kind(self.policy.kind).bc_minibatch_size, seed=cfg.seed + state.dagger_updates,
                                sample=cfg.dagger_sample)
        except Exception as exc:  # noqa: BLE001 - as an RFT round's: PPO goes on (it would fail again on restart)
            failed = self.count("dagger_failed")
            log.warning("DAgger round after PPO update %d failed, PPO goes on without it: %s", state.dagger_updates, exc)
            return {M.DAGGER_FAILED_TOTAL: float(failed)}
