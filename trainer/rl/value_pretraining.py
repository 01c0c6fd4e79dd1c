"""Value pretraining: critic-only updates on the policy's own rollouts before PPO moves the actor,
until ``ppo.value_pretrain_done`` says the critic explains the returns, stopped improving, or the
phase ran its batches or seconds. No version is published while it lasts (the acting policy is
unchanged). The phase's losses, explained variances and start time live in the checkpoint
(``PPOState``), so a restart goes on counting where the last run stopped.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainer.core import metric_names as M
from trainer.rl import ppo
from trainer.rl.config import TrainConfig
from trainer.rl.state import PPOState


@dataclass(frozen=True)
class ValuePretraining:
    """When the critic trains alone (``critic_only``) and what each such batch taught it (``record``)."""

    criterion: ppo.ValuePretrainCriterion

    @classmethod
    def from_config(cls, cfg: TrainConfig) -> ValuePretraining:
        return cls(ppo.ValuePretrainCriterion(cfg.value_pretrain_min_ev, cfg.value_pretrain_rel_tol,
                                              cfg.value_pretrain_patience, cfg.value_pretrain_max_batches,
                                              cfg.value_pretrain_max_s))

    def critic_only(self, state: PPOState, now: float) -> bool:
        """Whether the update of a batch that arrived at wall-clock ``now`` trains the critic alone;
        the phase's clock starts at its first batch."""
        if state.vp_started is None:
            state.vp_started = now
        return not ppo.value_pretrain_done(state.vp_losses, state.vp_evs, self.criterion, now - state.vp_started)

    @staticmethod
    def record(state: PPOState, metrics: dict[str, float]) -> None:
        """A critic-only update's loss and explained variance join the phase's history."""
        state.vp_losses.append(metrics[M.VALUE_LOSS])
        state.vp_evs.append(metrics[M.EXPLAINED_VARIANCE])
