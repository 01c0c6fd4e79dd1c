"""PPO core as pure functions (after CleanRL's ppo.py and verl's core_algos.py).

Shapes: ``B`` trajectories padded to ``T`` steps, ``N`` flattened valid steps. ``mask[b, t]``
is 1 for a real step and 0 for padding; padding never leaks into a loss or a mean. Every
trajectory in a batch ended; the value after its last step is 0 when it ended in a terminal
state (the task said done) and ``bootstrap[b]`` = V(s_T) when it was truncated (the step budget
or the timeout ran out: the task was not over, so the return goes on beyond what we saw).

Names follow the papers: decoupled GAE (``lam_policy`` for the actor's advantages,
``lam_critic`` for the critic's targets, UI-TARS-2 / VAPO), length-adaptive
``lam_policy = 1 - 1 / (alpha * l)``, clip-higher (``eps_low``, ``eps_high``, DAPO), the
behaviour log-prob carried by each step as ``old_logprob`` with an optional truncated
importance weight, and a value-pretraining phase (critic only, lambda = 1, fixed policy).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import torch


# ---------------------------------------------------------------- masked statistics


def masked_mean(x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Mean of ``x`` over entries where ``mask`` is 1 (any shape, same as ``x``) -> scalar."""
    if mask is None:
        return x.mean()
    mask = mask.to(x.dtype)
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


def masked_whiten(x: torch.Tensor, mask: torch.Tensor | None = None, eps: float = 1e-8) -> torch.Tensor:
    """``(x - mean) / std`` over the valid entries; padding is left at 0. Same shape as ``x``."""
    mean = masked_mean(x, mask)
    var = masked_mean((x - mean) ** 2, mask)
    out = (x - mean) / torch.sqrt(var + eps)
    return out if mask is None else out * mask.to(x.dtype)


# ---------------------------------------------------------------- advantages


def length_adaptive_lam(lengths: torch.Tensor, alpha: float) -> torch.Tensor:
    """Per-trajectory ``lam_policy = 1 - 1 / (alpha * l)``, clamped to [0, 1].

    lengths: [B] number of valid steps per trajectory (>= 1). Returns [B] float.
    Longer trajectories get a larger lambda (less bias where the reward is far away).
    """
    if alpha <= 0:
        raise ValueError(f"alpha={alpha}: must be > 0")
    lam = 1.0 - 1.0 / (alpha * lengths.to(torch.float32).clamp(min=1.0))
    return lam.clamp(0.0, 1.0)


def compute_gae(rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float,
                lam: float | torch.Tensor, bootstrap: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation for a padded batch of ended trajectories.

    rewards, values, mask: [B, T]; lam: a float or [B] (one lambda per trajectory); bootstrap:
    [B] the value after each trajectory's last step (0 for a terminal end, V(s_T) for a
    truncated one; default all 0).
    delta_t = r_t + gamma * V_{t+1} - V_t  (V_{t+1} = bootstrap after the last step)
    A_t = delta_t + gamma * lam * m_{t+1} * A_{t+1}
    Returns (advantages [B, T], returns [B, T] = advantages + values), both 0 on padding.
    """
    B, T = rewards.shape
    mask = mask.to(rewards.dtype)
    lam_t = torch.as_tensor(lam, dtype=rewards.dtype).expand(B) if not torch.is_tensor(lam) or lam.dim() == 0 \
        else lam.to(rewards.dtype)
    boot = torch.zeros(B, dtype=rewards.dtype) if bootstrap is None else bootstrap.to(rewards.dtype)
    adv = torch.zeros_like(rewards)
    last = torch.zeros(B, dtype=rewards.dtype)
    next_value = torch.zeros(B, dtype=rewards.dtype)
    next_mask = torch.zeros(B, dtype=rewards.dtype)  # 0 past the last step
    for t in reversed(range(T)):
        # V after step t: the next step's value, or the bootstrap when t is the last valid step
        after = next_mask * next_value + (1 - next_mask) * boot
        delta = rewards[:, t] + gamma * after - values[:, t]
        last = delta + gamma * lam_t * next_mask * last
        adv[:, t] = last * mask[:, t]
        next_value, next_mask = values[:, t], mask[:, t]
    return adv, (adv + values) * mask


def decoupled_gae(rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float,
                  lam_critic: float, alpha: float | None = None, lam_policy: float | None = None,
                  bootstrap: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Decoupled GAE: actor advantages with ``lam_policy``, critic targets with ``lam_critic``.

    rewards, values, mask: [B, T]; bootstrap: [B] as in ``compute_gae``. ``lam_policy`` is
    either given, or length-adaptive from ``alpha`` (per trajectory). Returns (advantages
    [B, T] for the actor, returns [B, T] for the critic). With ``lam_policy == lam_critic`` it
    is ordinary (coupled) GAE.
    """
    if lam_policy is None:
        if alpha is None:
            raise ValueError("give lam_policy or alpha")
        lam_policy_t: float | torch.Tensor = length_adaptive_lam(mask.sum(dim=1), alpha)
    else:
        lam_policy_t = lam_policy
    advantages, _ = compute_gae(rewards, values, mask, gamma, lam_policy_t, bootstrap)
    _, returns = compute_gae(rewards, values, mask, gamma, lam_critic, bootstrap)
    return advantages, returns


# ---------------------------------------------------------------- losses


LOG_RATIO_LIMIT = 20.0


def ppo_policy_loss(logprob: torch.Tensor, old_logprob: torch.Tensor, advantages: torch.Tensor,
                    eps_low: float, eps_high: float, mask: torch.Tensor | None = None,
                    behaviour_logprob: torch.Tensor | None = None,
                    tis_cap: float | None = None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Clipped surrogate with clip-higher: ratio clipped to [1 - eps_low, 1 + eps_high].

    logprob: [N] under the weights being trained; old_logprob: [N] the proximal policy's, by
    default the behaviour log-prob the step carries (so the ratio is the importance correction
    against the policy that acted). When ``behaviour_logprob`` and ``tis_cap`` are given
    (decoupled PPO: ``old_logprob`` recomputed at the start of the update), each term is also
    weighted by the truncated IS weight ``min(exp(old - behaviour), tis_cap)`` (no gradient).
    advantages: [N]. Returns (scalar loss to minimise, stats: ratio [N], clip_frac scalar).

    The log-ratio is clamped to [-20, 20] before exp: a ratio of exp(88) overflows float32, and
    inf times a zero truncated-IS weight is NaN (seen when the acting weights were not the ones
    trained). Beyond +-20 the term has no gradient: for a positive advantage the clip had
    already stopped it; for a negative one plain PPO would still push (with a weight of e^20).
    """
    ratio = torch.exp(torch.clamp(logprob - old_logprob, -LOG_RATIO_LIMIT, LOG_RATIO_LIMIT))
    surr1 = ratio * advantages
    surr2 = torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high) * advantages
    per_step = -torch.min(surr1, surr2)
    if behaviour_logprob is not None and tis_cap is not None:
        weight = torch.exp(old_logprob - behaviour_logprob).clamp(max=tis_cap).detach()
        per_step = per_step * weight
    loss = masked_mean(per_step, mask)
    return loss, {"ratio": ratio.detach(), "clip_frac": clip_fraction(ratio.detach(), eps_low, eps_high, mask)}


def value_loss(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor | None = None,
               old_values: torch.Tensor | None = None, clip: float | None = None) -> torch.Tensor:
    """0.5 * (V - R)^2, optionally PPO-clipped around ``old_values``. values, returns: [N] -> scalar."""
    err = (values - returns) ** 2
    if old_values is not None and clip is not None:
        clipped = old_values + torch.clamp(values - old_values, -clip, clip)
        err = torch.max(err, (clipped - returns) ** 2)
    return 0.5 * masked_mean(err, mask)


def entropy_bonus(entropy: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Mean entropy [N] -> scalar; the total loss subtracts ``ent_coef`` times it."""
    return masked_mean(entropy, mask)


def kl_penalty(logprob: torch.Tensor, ref_logprob: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Schulman's k3 estimator of KL(pi || ref) from sampled actions: E[exp(d) - d - 1], d = ref - logprob.

    logprob, ref_logprob: [N] -> scalar, >= 0 and unbiased (d clamped like the PPO ratio's).
    """
    d = torch.clamp(ref_logprob - logprob, -LOG_RATIO_LIMIT, LOG_RATIO_LIMIT)
    return masked_mean(torch.expm1(d) - d, mask)  # expm1: exp(d) - 1 - d cancels to 0 in float32 for |d| < ~1e-3


def approx_kl(logprob: torch.Tensor, old_logprob: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """How far an update moved the policy: k3's estimate of KL(old || new) from actions the old
    policy sampled, E[r - 1 - log r] with r = exp(logprob - old_logprob) (CleanRL's and SB3's
    ``approx_kl``). Unbiased under the old policy's samples, which the batch's are; ``kl_penalty``'s
    direction, E[1/r - 1 + log r], is not, and grows as e^|log r| where an update all but drops a
    sampled action (1e6 in runs from random weights)."""
    return kl_penalty(old_logprob, logprob, mask)


# ---------------------------------------------------------------- metrics


def clip_fraction(ratio: torch.Tensor, eps_low: float, eps_high: float, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Share of steps whose ratio lies outside [1 - eps_low, 1 + eps_high]. ratio: [N] -> scalar."""
    outside = ((ratio < 1.0 - eps_low) | (ratio > 1.0 + eps_high)).to(torch.float32)
    return masked_mean(outside, mask)


def explained_variance(values: torch.Tensor, returns: torch.Tensor) -> float:
    """1 - Var(R - V) / Var(R) over [N]; nan when the returns do not vary."""
    var_r = torch.var(returns, unbiased=False)
    if var_r.item() == 0:
        return float("nan")
    return float(1.0 - torch.var(returns - values, unbiased=False) / var_r)


def correlation(x: torch.Tensor, y: torch.Tensor) -> float:
    """Pearson correlation of two [N] tensors (value vs reward); nan when either is constant."""
    x, y = x.to(torch.float64), y.to(torch.float64)
    xc, yc = x - x.mean(), y - y.mean()
    denom = torch.sqrt((xc ** 2).sum() * (yc ** 2).sum())
    if denom.item() == 0:
        return float("nan")
    return float((xc * yc).sum() / denom)


# ---------------------------------------------------------------- value pretraining (staleness: trainer.rl.intake)


@dataclass(frozen=True)
class ValuePretrainCriterion:
    """Stop value pretraining when the critic explains the returns (``ev >= min_explained_variance``)
    or its loss has stopped moving (relative change < ``rel_tol`` for ``patience`` batches in a
    row), and in any case after ``max_batches`` (0 disables the phase) or, when ``max_seconds`` > 0,
    once the phase has lasted that long (long episodes make each batch slow to gather)."""

    min_explained_variance: float = 0.5
    rel_tol: float = 0.05
    patience: int = 3
    max_batches: int = 20
    max_seconds: float = 0.0


def value_pretrain_done(losses: Sequence[float], evs: Sequence[float], crit: ValuePretrainCriterion,
                        elapsed_s: float = 0.0) -> bool:
    """True once the critic-only phase should end, given per-batch losses and explained variances
    and the seconds since its first batch."""
    if len(losses) >= crit.max_batches:
        return True
    if losses and crit.max_seconds > 0 and elapsed_s >= crit.max_seconds:
        return True
    if evs and not math.isnan(evs[-1]) and evs[-1] >= crit.min_explained_variance:
        return True
    if len(losses) > crit.patience:
        recent = list(losses[-(crit.patience + 1):])
        changes = [abs(b - a) / max(abs(a), 1e-8) for a, b in zip(recent, recent[1:])]
        return all(c < crit.rel_tol for c in changes)
    return False
