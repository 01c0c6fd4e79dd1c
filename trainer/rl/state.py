"""What the PPO learner checkpoints: every learner's fields (``LearnerState``) and the facts of
its own phases, so a restart goes on where the last run stopped (the same KL anchor, value
pretraining's progress and clock, the rounds' cadence).

Each fact has one field here and one collaborator that changes it: the KL anchor
(trainer.rl.kl_reference), value pretraining (trainer.rl.value_pretraining), the rounds' counts
and the per-task outcomes RFT reads (trainer.rl.rounds), the entropy band's coefficient
(trainer.rl.sil_replay.SelfImitation). A checkpoint written while these lived
in an untyped ``extra`` dict loads as these fields (``LearnerState._lift_extra``).
"""

from __future__ import annotations

import math
from typing import Annotated, Any

from pydantic import BeforeValidator, Field

from trainer.core.learner import LearnerState


def _null_is_nan(values: Any) -> Any:
    """JSON has no NaN: a checkpoint stores one as null (an explained variance of constant returns)."""
    return [math.nan if v is None else v for v in values] if isinstance(values, list) else values


Floats = Annotated[list[float], BeforeValidator(_null_is_nan)]


class PPOState(LearnerState):
    """The PPO learner's checkpointed state (``Checkpoint[PPOState]``)."""

    kind: str | None = Field(None, description="the policy kind the weights file holds; None in checkpoints "
                                               "written before it was recorded (then --policy-kind says)")
    start_version: int = Field(0, description="the version this trainer first started from (pi_sft after a cold start)")
    kl_ref_version: int | None = Field(None, description="the KL penalty's reference version, fixed at the first "
                                                         "penalised update so a restart keeps the anchor")
    vp_started: float | None = Field(None, description="wall-clock time (epoch s) of value pretraining's first batch")
    vp_losses: Floats = Field(default_factory=list, description="value loss of each critic-only batch, in order")
    vp_evs: Floats = Field(default_factory=list, description="explained variance of each critic-only batch, in order")
    task_outcomes: dict[str, list[int]] = Field(default_factory=dict, description="per task, the success (1/0) of "
                                                "its last RFT_WINDOW trained episodes")
    ppo_updates: int = Field(0, description="PPO updates made with RFT rounds on (every rft_every-th has a round)")
    dagger_updates: int = Field(0, description="PPO updates made with DAgger rounds on (every dagger_every-th has one)")
    ent_coef: float | None = Field(None, description="the entropy coefficient of the next update as the entropy band "
                                                     "(ent_floor) adapted it; None: the configured ent_coef")
