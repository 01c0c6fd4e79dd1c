"""Self-imitation learning inside the PPO update (SIL: Oh et al. 2018, "Self-Imitation Learning"),
and the entropy band that keeps it from collapsing the policy (after SPEAR, arXiv 2509.22601).

Why: from random weights a task that random clicks solve a few percent of the time gives PPO one
success among hundreds of failures. PPO whitens that success's advantage with its batch, trains
on it for one update, and forgets it; value pretraining and RFT rounds are off there (no cold
start), so the flywheel's own idea, that the policy's V(s) = 1 trajectories are data to learn
from, was not used where it matters most. RFT rounds (trainer.sft.rft) do use the policy's own
successes, but every ``rft_every`` updates, by maximum likelihood of every step whatever the critic
says, with an optimiser of their own; they drove the entropy to 0.06-0.08.

SIL keeps the policy's best episodes across versions (trainer.rl.sil_replay: per task the newest
successes, then the highest returns) and adds to every PPO minibatch, on replayed steps,

    L_sil = -log pi(a_t|s_t) * (R_t - V(s_t))+  +  beta/2 * ((R_t - V(s_t))+)^2

with R_t the discounted return-to-go the episode got (``returns_to_go``). The clipped advantage
is the off-policy correction (SIL's lower-bound argument): R_t is a return some policy got from
(s_t, a_t), a lower bound of the optimal Q there, so raising pi(a_t|s_t) where it beats the current
V(s_t), and V(s_t) toward it, is sound whatever version acted, with no importance ratio; once the
policy does as well as the episode did (V(s_t) >= R_t) the step pulls no more. A truncated episode's
return-to-go has no bootstrap, a lower bound again where rewards are not negative. Replay is
prioritised by that same clipped advantage, so the steps the policy has not yet learnt are the
ones replayed; sampled steps get no importance weights (the term is a lower-bound push, not an
unbiased gradient estimate: the SIL paper's choice).

Entropy band: imitation sharpens the policy, and a policy that no longer explores finds no new
successes. When an update's mean entropy falls below ``ent_floor``, the entropy coefficient of the
next update is multiplied by ``ENT_RAISE`` (at most ``ENT_COEF_MAX``); above ``ent_ceiling`` it is
divided by it, back toward the configured ``ent_coef`` and never below it. The adapted coefficient
is the learner's typed state (trainer.rl.state.PPOState.ent_coef), so a restart keeps it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

ENT_RAISE = 1.5  # factor per update by which the entropy coefficient moves outside the band
ENT_COEF_MAX = 0.1  # the band never raises the coefficient past this (PPO's loss is of order 1)
ENT_COEF_START = 1e-3  # what a configured coefficient of 0 is raised from


def returns_to_go(rewards: list[float], gamma: float) -> list[float]:
    """R_t = sum_{k >= t} gamma^(k-t) r_k for each step of one episode."""
    out, running = [0.0] * len(rewards), 0.0
    for t in range(len(rewards) - 1, -1, -1):
        running = rewards[t] + gamma * running
        out[t] = running
    return out


def sil_loss(logprob: torch.Tensor, value: torch.Tensor, returns: torch.Tensor,
             beta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """SIL's loss on M replayed steps (a mean over them) and their clipped advantages [M]
    (detached). ``logprob`` [M] and ``value`` [M] carry gradients; ``returns`` [M] is R_t. The
    policy term's weight (R - V)+ is detached (an advantage); the value term moves V up toward R
    only, where R beat it."""
    clipped = (returns - value).clamp(min=0.0)
    weight = clipped.detach()
    loss = -(logprob * weight).mean() + 0.5 * beta * (clipped ** 2).mean()
    return loss, weight


@dataclass
class SILSample:
    """M replayed steps for one update (trainer.rl.sil_replay.SuccessReplay.sample). The update
    fills ``clipped`` with each step's last measured (R - V)+ (NaN: not evaluated), which the
    replay reads back as the steps' priorities."""

    inputs: Any  # [M, C, H, W] uint8, or a list of M policy samples (as Batch.images)
    instructions: list[str]  # [M]
    actions: list[Any]  # [M]
    returns: torch.Tensor  # [M] R_t
    keys: list[tuple[int, int]]  # [M] (episode key, step) in the replay
    replay_steps: int = 0  # the replay's size when it was drawn
    replay_episodes: int = 0
    clipped: torch.Tensor = field(default=None)  # [M]

    def __post_init__(self) -> None:
        if self.clipped is None:
            self.clipped = torch.full((len(self.actions),), float("nan"))

    def parts(self, n: int) -> list[torch.Tensor]:
        """The sample's positions split into ``n`` near-equal parts, one per minibatch of an
        epoch (each epoch goes over the same sample again, as it does over the batch)."""
        return list(torch.arange(len(self.actions)).tensor_split(max(n, 1)))


def adapt_ent_coef(coef: float, entropy: float, base: float, floor: float, ceiling: float) -> float:
    """The entropy coefficient for the next update, given this one's ``coef`` and mean ``entropy``:
    raised below ``floor``, lowered toward ``base`` (the configured one) above ``ceiling``,
    unchanged inside the band or when the band is off (``floor`` 0) or the entropy unknown."""
    if floor <= 0 or entropy != entropy:  # off, or NaN
        return coef
    if entropy < floor:
        return min(max(coef, ENT_COEF_START) * ENT_RAISE, max(ENT_COEF_MAX, base))
    if entropy > ceiling:
        return max(base, coef / ENT_RAISE)
    return coef
