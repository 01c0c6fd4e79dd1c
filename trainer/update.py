"""One PPO update (and one critic-only update) over a batch of ended episodes (a truncated one
bootstraps from the value of the state it stopped in).

Pure with respect to the outside world: tensors in, weights and optimiser changed, metrics
out. The streaming loop (trainer/stream.py) and the offline benchmark call the same code.
Invariant: a batch's samples are ordered trajectory by trajectory, step by step, so the
[B, T] tensors of GAE and the flattened [N] tensors line up through ``mask.bool()``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch

from trainer import ppo


@dataclass
class EpisodeSample:
    """One complete episode as the trainer needs it (screenshots already preprocessed)."""

    episode_id: str
    images: list[torch.Tensor]  # per step [C, H, W] uint8 from policy.preprocess
    instructions: list[str]
    actions: list[Any]
    logprobs: list[float]  # behaviour log-probs carried by the steps
    rewards: list[float]  # per step; the scored reward sits on the last step
    policy_version: int  # oldest version that acted in it
    thought_chars: float = 0.0
    # the step budget or the timeout ended it (not the task): GAE bootstraps from V(s_T) there
    truncated: bool = False
    bootstrap_input: Any = None  # the policy's input for s_T, the state after the last step (if it has one)


@dataclass
class Batch:
    images: Any  # [N, C, H, W] uint8, or a list of N policy samples (see _stack)
    instructions: list[str]  # [N]
    actions: list[Any]  # [N]
    behaviour_logprob: torch.Tensor  # [N]
    rewards: torch.Tensor  # [B, T]
    mask: torch.Tensor  # [B, T]
    episode_return: torch.Tensor  # [B]
    episode_ids: list[str] = field(default_factory=list)
    truncated: torch.Tensor | None = None  # [B] bool
    bootstrap_inputs: list[Any] = field(default_factory=list)  # [B] policy input of s_T, or None


def collate(episodes: list[EpisodeSample]) -> Batch:
    T = max(len(e.actions) for e in episodes)
    rewards = torch.zeros(len(episodes), T)
    mask = torch.zeros(len(episodes), T)
    for b, e in enumerate(episodes):
        rewards[b, :len(e.rewards)] = torch.tensor(e.rewards, dtype=torch.float32)
        mask[b, :len(e.actions)] = 1.0
    return Batch(
        images=_stack([img for e in episodes for img in e.images]),
        instructions=[s for e in episodes for s in e.instructions],
        actions=[a for e in episodes for a in e.actions],
        behaviour_logprob=torch.tensor([lp for e in episodes for lp in e.logprobs], dtype=torch.float32),
        rewards=rewards, mask=mask, episode_return=rewards.sum(dim=1),
        episode_ids=[e.episode_id for e in episodes],
        truncated=torch.tensor([e.truncated for e in episodes]),
        bootstrap_inputs=[e.bootstrap_input for e in episodes],
    )


def _stack(inputs: list) -> Any:
    """Per-step policy inputs: image tensors are stacked; a policy's own samples (the LM's
    rendered contexts, ``step_inputs``) stay a list."""
    return torch.stack(inputs) if isinstance(inputs[0], torch.Tensor) else inputs


def _take(inputs: Any, ids: list[int]) -> Any:
    return inputs[torch.tensor(ids)] if isinstance(inputs, torch.Tensor) else [inputs[i] for i in ids]


def _evaluate_all(policy, batch: Batch, chunk: int = 256) -> tuple[torch.Tensor, torch.Tensor]:
    """Current log-probs and values for every step, without gradients: ([N], [N])."""
    logps, values = [], []
    with torch.no_grad():
        for i in range(0, len(batch.actions), chunk):
            lp, v, _ = policy.evaluate(batch.images[i:i + chunk], batch.instructions[i:i + chunk], batch.actions[i:i + chunk])
            logps.append(lp)
            values.append(v)
    return torch.cat(logps), torch.cat(values)


def _to_bt(flat: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    out = torch.zeros_like(mask)
    out[mask.bool()] = flat
    return out


def bootstrap_values(policy, batch: Batch, values_bt: torch.Tensor) -> torch.Tensor:
    """[B] value after each episode's last step: 0 when it ended in a terminal state; for a
    truncated one V(s_T) from the policy's ``values`` on its input for s_T, or, when the policy
    or the episode has none, V of the last state it acted in (the closest estimate we hold)."""
    boot = torch.zeros(len(batch.episode_ids))
    if batch.truncated is None or not batch.truncated.any():
        return boot
    last = batch.mask.sum(1).long() - 1
    boot[batch.truncated] = values_bt[torch.arange(len(boot)), last][batch.truncated]
    have = [b for b, x in enumerate(batch.bootstrap_inputs) if batch.truncated[b] and x is not None]
    if have and hasattr(policy, "values"):
        with torch.no_grad():
            boot[have] = policy.values(_stack([batch.bootstrap_inputs[b] for b in have]),
                                       [batch.instructions[int(batch.mask[:b].sum())] for b in have])
    return boot


def ppo_update(policy, optimizer: torch.optim.Optimizer, batch: Batch, cfg, critic_only: bool = False) -> dict[str, float]:
    """PPO epochs over ``batch``; ``critic_only`` trains the value head alone with lambda = 1
    (value pretraining: the acting policy stays fixed). Returns scalar metrics."""
    t0 = time.perf_counter()
    policy.train()
    mask_b = batch.mask.bool()
    _, values0 = _evaluate_all(policy, batch)
    values_bt = _to_bt(values0, batch.mask)
    lam_critic = 1.0 if critic_only else cfg.lam_critic
    lam_policy = None if cfg.lam_policy < 0 else cfg.lam_policy  # None: length-adaptive from alpha
    boot = bootstrap_values(policy, batch, values_bt)
    adv_bt, ret_bt = ppo.decoupled_gae(batch.rewards, values_bt, batch.mask, cfg.gamma, lam_critic, alpha=cfg.alpha,
                                       lam_policy=lam_policy, bootstrap=boot)
    adv, ret = adv_bt[mask_b], ret_bt[mask_b]
    if cfg.norm_adv and adv.numel() > 1:
        adv = ppo.masked_whiten(adv)
    old_logprob = batch.behaviour_logprob
    proximal = _evaluate_all(policy, batch)[0] if cfg.tis_cap > 0 else None
    params = [p for n, p in policy.named_parameters() if n.startswith("value_head")] if critic_only \
        else [p for p in policy.parameters()]
    N = len(batch.actions)
    sums: dict[str, float] = {"pg_loss": 0.0, "value_loss": 0.0, "entropy": 0.0, "clip_frac": 0.0, "approx_kl": 0.0}
    n_mb = 0
    for _ in range(cfg.epochs):
        for idx in torch.randperm(N).split(cfg.minibatch_size):
            ids = idx.tolist()
            logprob, value, entropy = policy.evaluate(_take(batch.images, ids), [batch.instructions[i] for i in ids],
                                                      [batch.actions[i] for i in ids])
            vloss = ppo.value_loss(value, ret[idx])
            if critic_only:
                loss, pg, clip_frac = vloss, torch.zeros(()), torch.zeros(())
            else:
                if proximal is not None:  # decoupled: clip around the proximal policy, reweight to behaviour
                    pg, stats = ppo.ppo_policy_loss(logprob, proximal[idx], adv[idx], cfg.eps_low, cfg.eps_high,
                                                    behaviour_logprob=old_logprob[idx], tis_cap=cfg.tis_cap)
                else:
                    pg, stats = ppo.ppo_policy_loss(logprob, old_logprob[idx], adv[idx], cfg.eps_low, cfg.eps_high)
                clip_frac = stats["clip_frac"]
                loss = pg + cfg.vf_coef * vloss - cfg.ent_coef * ppo.entropy_bonus(entropy)
                if cfg.kl_coef > 0:
                    loss = loss + cfg.kl_coef * ppo.kl_penalty(logprob, old_logprob[idx])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm)
            if critic_only:  # only the value head moves: drop any gradient that reached the trunk
                for n, p in policy.named_parameters():
                    if not n.startswith("value_head"):
                        p.grad = None
            optimizer.step()
            with torch.no_grad():
                sums["pg_loss"] += float(pg)
                sums["value_loss"] += float(vloss)
                sums["entropy"] += float(entropy.mean())
                sums["clip_frac"] += float(clip_frac)
                sums["approx_kl"] += float(ppo.kl_penalty(logprob, old_logprob[idx]))
            n_mb += 1
    policy.eval()
    first = batch.mask.clone()
    first[:, 1:] = 0
    metrics = {k: v / max(n_mb, 1) for k, v in sums.items()}
    metrics.update({
        "reward_mean": float(batch.episode_return.mean()),
        "success_rate": float((batch.episode_return > 0).float().mean()),
        "episodes": float(len(batch.episode_ids)),
        "steps": float(N),
        "episode_length": float(batch.mask.sum(1).mean()),
        "explained_variance": ppo.explained_variance(values0, ret),
        "value_reward_corr": ppo.correlation(values_bt[first.bool()], batch.episode_return),
        "critic_only": float(critic_only),
        "update_time_s": time.perf_counter() - t0,
    })
    return metrics
