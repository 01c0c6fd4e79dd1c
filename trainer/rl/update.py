"""One PPO update (and one critic-only update) over a batch of ended episodes (a truncated one
bootstraps from the value of the state it stopped in).

Pure with respect to the outside world: tensors in, weights and optimiser changed, metrics
out. The streaming loop (trainer/rl/streaming_ppo.py) and the offline benchmark call the same code.
Invariant: a batch's samples are ordered trajectory by trajectory, step by step, so the
[B, T] tensors of GAE and the flattened [N] tensors line up through ``mask.bool()``.
Given a ``Rank`` (trainer.rl.collectives), N processes share one update of the same batch and end
with the weights one process would reach (to float rounding): each evaluates and backpropagates
its part of every minibatch, gradients and metrics are summed over the ranks.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch

from trainer.core import metric_names as M
from trainer.rl import chunks, ppo
from trainer.rl.collectives import Rank, all_reduce_grads, all_reduce_sums, gather_parts, part
from trainer.rl.self_imitation import SILSample, sil_loss


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
    task: str = ""  # the task's name and whether the episode succeeded: RFT's per-task success window
    success: bool = False
    experts: list[Any] | None = None  # per step the solver's action there (Step.expert_action) or None


@dataclass
class Batch:
    """``E`` episodes as ``B`` rows of at most ``chunk_steps`` steps each (trainer.rl.chunks: a
    long episode spans consecutive rows); ``N`` steps flattened episode by episode."""

    images: Any  # [N, C, H, W] uint8, or a list of N policy samples (see stack_inputs)
    instructions: list[str]  # [N]
    actions: list[Any]  # [N]
    behaviour_logprob: torch.Tensor  # [N]
    rewards: torch.Tensor  # [B, T]
    mask: torch.Tensor  # [B, T]
    episode_return: torch.Tensor  # [E]
    episode_ids: list[str] = field(default_factory=list)  # [E]
    truncated: torch.Tensor | None = None  # [B] bool: the row ends an episode the step budget or timeout cut
    bootstrap_inputs: list[Any] = field(default_factory=list)  # [B] policy input of s_T (last chunks), or None
    ref_logprob: torch.Tensor | None = None  # [N] the reference policy's log-probs (reference_logprobs)
    next_row: torch.Tensor | None = None  # [B] long: the row of the episode's next chunk, -1 after its last
    episode_length: torch.Tensor | None = None  # [B] the whole episode's steps (length-adaptive lambda reads it)
    expert_actions: list[Any] = field(default_factory=list)  # [N] the expert's label per step or None ([]: none)


def make_optimizer(policy, lr: float, head_lr_mult: float = 1.0,
                   optimizer_class: type = torch.optim.Adam) -> torch.optim.Optimizer:
    """Adam (PPO's, DPO's; a distributed follower passes its leader's class) at ``lr``; with
    ``head_lr_mult`` != 1, the parts the policy trains from scratch (its ``param_groups``: the
    language policy's patch adapter, pointer and value head) at that multiple. A policy without
    such parts (``PolicyDefaults.param_groups``) has one rate."""
    if head_lr_mult != 1:
        return optimizer_class(policy.param_groups(lr, head_lr_mult), lr=lr)
    return optimizer_class(policy.parameters(), lr=lr)


def collate(episodes: list[EpisodeSample], chunk_steps: int = 0) -> Batch:
    """``episodes`` as one batch, each cut into rows of at most ``chunk_steps`` steps (0: one row
    per episode). Only an episode's last row carries its truncation and s_T input."""
    rows = [(b, s, t) for b, e in enumerate(episodes) for s, t in chunks.chunk_spans(len(e.actions), chunk_steps)]
    T = max(t - s for _, s, t in rows)
    rewards = torch.zeros(len(rows), T)
    mask = torch.zeros(len(rows), T)
    next_row, truncated, bootstrap_inputs = [], [], []
    for r, (b, s, t) in enumerate(rows):
        e, last = episodes[b], t == len(episodes[b].actions)
        rewards[r, :t - s] = torch.tensor(e.rewards[s:t], dtype=torch.float32)
        mask[r, :t - s] = 1.0
        next_row.append(-1 if last else r + 1)
        truncated.append(e.truncated and last)
        bootstrap_inputs.append(e.bootstrap_input if last else None)
    return Batch(
        images=stack_inputs([img for e in episodes for img in e.images]),
        instructions=[s for e in episodes for s in e.instructions],
        actions=[a for e in episodes for a in e.actions],
        expert_actions=[x for e in episodes for x in (e.experts or [None] * len(e.actions))],
        behaviour_logprob=torch.tensor([lp for e in episodes for lp in e.logprobs], dtype=torch.float32),
        rewards=rewards, mask=mask, episode_return=torch.tensor([float(sum(e.rewards)) for e in episodes]),
        episode_ids=[e.episode_id for e in episodes],
        truncated=torch.tensor(truncated), bootstrap_inputs=bootstrap_inputs,
        next_row=torch.tensor(next_row), episode_length=torch.tensor([len(episodes[b].actions) for b, _, _ in rows]),
    )


def stack_inputs(inputs: list) -> Any:
    """Per-step policy inputs: image tensors are stacked; a policy's own samples (the LM's
    rendered contexts, ``step_inputs``) stay a list."""
    return torch.stack(inputs) if isinstance(inputs[0], torch.Tensor) else inputs


def _take(inputs: Any, ids: list[int]) -> Any:
    return inputs[torch.tensor(ids)] if isinstance(inputs, torch.Tensor) else [inputs[i] for i in ids]


def _evaluate_all(policy, batch: Batch, chunk: int = 256, me: Rank | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Current log-probs and values for every step, without gradients: ([N], [N]). With ``me``
    each rank evaluates its part of the steps and the parts are gathered."""
    N = len(batch.actions)
    lo, hi = 0, N
    if me is not None:
        mine = part(torch.arange(N), me)
        lo, hi = (int(mine[0]), int(mine[-1]) + 1) if len(mine) else (0, 0)
    logps, values = [], []
    with torch.no_grad():
        for i in range(lo, hi, chunk):
            j = min(i + chunk, hi)
            lp, v, _ = policy.evaluate(batch.images[i:j], batch.instructions[i:j], batch.actions[i:j])
            logps.append(lp.cpu())  # the batch's per-step tensors live on the CPU; the model may not
            values.append(v.cpu())
    logp, value = (torch.cat(logps), torch.cat(values)) if logps else (torch.zeros(0), torch.zeros(0))
    return (logp, value) if me is None else (gather_parts(logp, N, me), gather_parts(value, N, me))


def reference_logprobs(reference, batch: Batch) -> torch.Tensor:
    """[N] log-probs of the batch's actions under the frozen reference policy (the KL penalty's
    anchor), computed once per batch before the update, on the rank that reads."""
    reference.eval()
    return _evaluate_all(reference, batch)[0]


def _layout(batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
    """(next_row [B], episode_length [B]); a batch built without them has one row per episode."""
    B = batch.mask.shape[0]
    next_row = batch.next_row if batch.next_row is not None else torch.full((B,), -1)
    length = batch.episode_length if batch.episode_length is not None else batch.mask.sum(1)
    return next_row, length


def _to_bt(flat: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    out = torch.zeros_like(mask)
    out[mask.bool()] = flat
    return out


def bootstrap_values(policy, batch: Batch, values_bt: torch.Tensor) -> torch.Tensor:
    """[B] value after each row's episode's last step (read on its last chunk): 0 when it ended in a terminal state; for a
    truncated one V(s_T) from the policy's ``values`` on its input for s_T, or, when the policy
    or the episode has none, V of the last state it acted in (the closest estimate we hold)."""
    boot = torch.zeros(batch.mask.shape[0])
    if batch.truncated is None or not batch.truncated.any():
        return boot
    last = batch.mask.sum(1).long() - 1
    boot[batch.truncated] = values_bt[torch.arange(len(boot)), last][batch.truncated]
    have = [b for b, x in enumerate(batch.bootstrap_inputs) if batch.truncated[b] and x is not None]
    if have:
        with torch.no_grad():
            boot[have] = policy.values(stack_inputs([batch.bootstrap_inputs[b] for b in have]),
                                       [batch.instructions[int(batch.mask[:b].sum())] for b in have]).cpu()
    return boot


def _minibatch_loss(policy, batch: Batch, idx: torch.Tensor, adv: torch.Tensor, ret: torch.Tensor,
                    proximal: torch.Tensor | None, cfg, critic_only: bool) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO's loss on the steps ``idx`` (every term a mean over them) and its scalar parts."""
    ids = idx.tolist()
    old_logprob = batch.behaviour_logprob[idx]
    out = policy.evaluate(_take(batch.images, ids), [batch.instructions[i] for i in ids], [batch.actions[i] for i in ids])
    logprob, value, entropy = (t.cpu() for t in out)  # a model on a GPU: the loss is small, gradients flow back
    vloss = ppo.value_loss(value, ret[idx])
    if critic_only:
        loss, pg, clip_frac = vloss, torch.zeros(()), torch.zeros(())
    else:
        if proximal is not None:  # decoupled: clip around the proximal policy, reweight to behaviour
            pg, stats = ppo.ppo_policy_loss(logprob, proximal[idx], adv[idx], cfg.eps_low, cfg.eps_high,
                                            behaviour_logprob=old_logprob, tis_cap=cfg.tis_cap)
        else:
            pg, stats = ppo.ppo_policy_loss(logprob, old_logprob, adv[idx], cfg.eps_low, cfg.eps_high)
        clip_frac = stats["clip_frac"]
        loss = pg + cfg.vf_coef * vloss - cfg.ent_coef * ppo.entropy_bonus(entropy)
        if cfg.kl_coef > 0:
            if batch.ref_logprob is None:
                raise ValueError("kl_coef > 0 needs the reference policy's log-probs (update.reference_logprobs)")
            loss = loss + cfg.kl_coef * ppo.kl_penalty(logprob, batch.ref_logprob[idx])
    expert_nll = _expert_nll(policy, batch, ids) if cfg.expert_coef > 0 and not critic_only else None
    if expert_nll is not None:  # a mean over the labelled steps, weighed by their share of the minibatch
        nll, labelled = expert_nll
        loss = loss + cfg.expert_coef * nll * (labelled / len(ids))
    with torch.no_grad():
        # how far this update moved the policy: from the proximal policy PPO clips around (the
        # behaviour policy's log-probs also carry the versions it lagged by: in a run from random
        # weights, whose entropy falls fast, that read as a "KL" of 1e6)
        moved_from = proximal[idx] if proximal is not None else old_logprob
        parts = {M.PG_LOSS: float(pg), M.VALUE_LOSS: float(vloss), M.ENTROPY: float(entropy.mean()),
                 M.CLIP_FRAC: float(clip_frac), M.APPROX_KL: float(ppo.approx_kl(logprob, moved_from))}
        if batch.ref_logprob is not None:
            parts[M.KL_REF] = float(ppo.kl_penalty(logprob, batch.ref_logprob[idx]))
        if expert_nll is not None:  # summed over the labelled steps (ppo_update divides by their count)
            parts[M.EXPERT_LOSS], parts[_EXPERT_N] = float(expert_nll[0]) * expert_nll[1], float(expert_nll[1])
    return loss, parts


def _sil_term(policy, sample: SILSample, pos: torch.Tensor, cfg) -> tuple[torch.Tensor, float]:
    """Self-imitation's loss on the replayed steps ``pos`` of ``sample``, weighed by ``sil_coef``
    (trainer.rl.self_imitation), evaluated as PPO's minibatch is; records their clipped
    advantages in ``sample.clipped``. -> (the weighted loss, the unweighted loss's value)."""
    ids = pos.tolist()
    logprob, value, _ = (t.cpu() for t in policy.evaluate(_take(sample.inputs, ids), [sample.instructions[i] for i in ids],
                                                          [sample.actions[i] for i in ids]))
    loss, clipped = sil_loss(logprob, value, sample.returns[pos], cfg.sil_beta)
    sample.clipped[pos] = clipped
    return cfg.sil_coef * loss, float(loss.detach())


_EXPERT_N = "_expert_labels"  # the labelled steps a minibatch's expert loss was summed over (not a metric)
_SUMMED = (M.EXPERT_LOSS, _EXPERT_N)  # parts that are sums over steps, not a rank's share of a mean


def _expert_nll(policy, batch: Batch, ids: list[int]) -> tuple[torch.Tensor, int] | None:
    """DAgger's term: the mean NLL of the expert's labels on the steps ``ids`` that have one, and
    how many those are; None when none has."""
    labelled = [i for i in ids if batch.expert_actions and batch.expert_actions[i] is not None]
    if not labelled:
        return None
    logprob, _, _ = policy.evaluate(_take(batch.images, labelled), [batch.instructions[i] for i in labelled],
                                    [batch.expert_actions[i] for i in labelled])
    return -logprob.cpu().mean(), len(labelled)


def _moved_enough(epoch_kl: float, epoch_n: float, cfg, critic_only: bool, me: Rank | None) -> bool:
    """Whether PPO's epochs stop after this one (``target_kl``, after Spinning Up's early stop):
    its minibatches' mean ``approx_kl`` from the policy the update started from passed 1.5 times
    the target. ``epoch_kl`` sums them (this rank's shares) and ``epoch_n`` counts them; with
    ``me`` every rank sums the shares and so reaches the same answer.

    A looser bound than a check before each step: a minibatch's KL is read before it steps and
    the epoch's mean weighs its minibatches alike, so the first epoch of a batch that fits one
    minibatch reads 0 (two epochs run at least) and the last step taken is not measured. With
    ``tis_cap`` 0 the KL is from the behaviour policy and carries the versions it lagged by."""
    if not cfg.target_kl or critic_only:
        return False
    if me is not None:
        epoch_kl = all_reduce_sums({"kl": epoch_kl})["kl"]
    return epoch_n > 0 and epoch_kl / epoch_n > 1.5 * cfg.target_kl


def ppo_update(policy, optimizer: torch.optim.Optimizer, batch: Batch, cfg, critic_only: bool = False,
               me: Rank | None = None, generator: torch.Generator | None = None,
               sil: SILSample | None = None) -> dict[str, float]:
    """PPO epochs over ``batch``; ``critic_only`` trains the value head alone with lambda = 1
    (value pretraining: the acting policy stays fixed). Returns scalar metrics under their
    trainer.core.metric_names (``losses/``, ``value/``, ``batch/``, ``train/``, ``perf/``).

    ``generator`` draws the minibatches (default: torch's global one). With ``me`` this rank
    shares the update with the others of the process group: all must call it on the same batch,
    weights, optimiser state and ``generator`` seed (trainer.rl.distributed sees to it).

    ``sil``: replayed steps whose self-imitation term (``sil_coef``, trainer.rl.self_imitation)
    joins each minibatch's loss, one part of them per minibatch of an epoch (one process only;
    none in a critic-only update)."""
    t0 = time.perf_counter()
    policy.train()
    mask_b = batch.mask.bool()
    # one pass over the batch gives both the values GAE needs and the proximal policy's
    # log-probs: no weight changes between them (a second pass cost 4% of an update)
    logprob0, values0 = _evaluate_all(policy, batch, me=me)
    values_bt = _to_bt(values0, batch.mask)
    lam_critic = 1.0 if critic_only else cfg.lam_critic
    lam_policy = None if cfg.lam_policy < 0 else cfg.lam_policy  # None: length-adaptive from alpha
    boot = bootstrap_values(policy, batch, values_bt)
    adv_bt, ret_bt = chunks.chunked_decoupled_gae(batch.rewards, values_bt, batch.mask, cfg.gamma, lam_critic,
                                                  *_layout(batch), boot, alpha=cfg.alpha, lam_policy=lam_policy)
    adv, ret = adv_bt[mask_b], ret_bt[mask_b]
    if cfg.norm_adv and adv.numel() > 1:
        adv = ppo.masked_whiten(adv)
    proximal = logprob0 if cfg.tis_cap > 0 else None
    params = [p for n, p in policy.named_parameters() if n.startswith("value_head")] if critic_only \
        else [p for p in policy.parameters()]
    N = len(batch.actions)
    sums: dict[str, float] = dict.fromkeys((M.PG_LOSS, M.VALUE_LOSS, M.ENTROPY, M.CLIP_FRAC, M.APPROX_KL)
                                           + ((M.KL_REF,) if batch.ref_logprob is not None else ())
                                           + (_SUMMED if cfg.expert_coef > 0 else ()), 0.0)
    n_mb = skipped = epochs = 0
    if sil is not None and me is not None:
        raise ValueError("self-imitation runs in one trainer process (TrainConfig.validate refuses it on several)")
    sil = None if critic_only else sil
    sil_parts = sil.parts(-(-N // cfg.minibatch_size)) if sil is not None else []
    sil_sum = sil_n = 0.0
    for epochs in range(1, cfg.epochs + 1):
        kl_before, n_before = sums[M.APPROX_KL], n_mb
        for k, idx in enumerate(torch.randperm(N, generator=generator).split(cfg.minibatch_size)):
            mine = idx if me is None else part(idx, me)
            share = len(mine) / len(idx)  # this rank's weight in the minibatch's mean
            optimizer.zero_grad(set_to_none=True)
            parts: dict[str, float] = {}
            if len(mine):
                loss, parts = _minibatch_loss(policy, batch, mine, adv, ret, proximal, cfg, critic_only)
                if sil_parts and len(sil_parts[k]):
                    term, parts[M.SIL_LOSS] = _sil_term(policy, sil, sil_parts[k], cfg)
                    loss = loss + term
                (loss if me is None else loss * share).backward()
            if me is not None:  # the sum of the ranks' shares: the whole minibatch's gradient
                all_reduce_grads(list(policy.parameters()))
            norm = torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm)
            if not torch.isfinite(norm):  # never step on NaN/inf gradients (every rank sees the same sum)
                skipped += 1
                continue
            if M.SIL_LOSS in parts:
                sil_sum, sil_n = sil_sum + parts.pop(M.SIL_LOSS), sil_n + 1
            for name, v in parts.items():  # the losses of the minibatches that stepped
                sums[name] += v if name in _SUMMED else v * share
            if critic_only:  # only the value head moves: drop any gradient that reached the trunk
                for n, p in policy.named_parameters():
                    if not n.startswith("value_head"):
                        p.grad = None
            optimizer.step()
            n_mb += 1
        if _moved_enough(sums[M.APPROX_KL] - kl_before, n_mb - n_before, cfg, critic_only, me):
            break
    if me is not None:
        sums = all_reduce_sums(sums)
    policy.eval()
    first = batch.mask.clone()
    first[:, 1:] = 0
    first[~chunks.episode_starts(_layout(batch)[0])] = 0  # an episode's first step, not a later chunk's
    labelled = sums.pop(_EXPERT_N, 0.0)
    expert_loss = sums.pop(M.EXPERT_LOSS, 0.0)
    metrics = {k: v / max(n_mb, 1) for k, v in sums.items()}
    if labelled:  # the mean NLL over every labelled step the update stepped on (absent: no label)
        metrics[M.EXPERT_LOSS] = expert_loss / labelled
    metrics.update({
        M.REWARD_MEAN: float(batch.episode_return.mean()),
        M.SUCCESS_RATE: float((batch.episode_return > 0).float().mean()),
        M.EPISODES: float(len(batch.episode_ids)),
        M.STEPS: float(N),
        M.EPISODE_LENGTH: float(batch.mask.sum() / len(batch.episode_ids)),
        M.EXPLAINED_VARIANCE: ppo.explained_variance(values0, ret),
        M.REWARD_CORR: ppo.correlation(values_bt[first.bool()], batch.episode_return),
        M.CRITIC_ONLY: float(critic_only),
        M.NONFINITE_SKIPPED: float(skipped),
        M.EPOCHS: float(epochs),
        M.UPDATE_TIME_S: time.perf_counter() - t0,
    })
    if sil is not None:
        metrics.update(_sil_metrics(sil, sil_sum, sil_n))
    return metrics


def _sil_metrics(sil: SILSample, loss_sum: float, n: float) -> dict[str, float]:
    """Self-imitation's figures of one update: its mean loss over the minibatches that stepped,
    the replayed steps and the replay's size, and their mean clipped advantage as last measured."""
    measured = sil.clipped[~sil.clipped.isnan()]
    return {M.SIL_LOSS: loss_sum / n if n else 0.0, M.SIL_STEPS: float(len(sil.actions)),
            M.SIL_REPLAY_STEPS: float(sil.replay_steps), M.SIL_REPLAY_EPISODES: float(sil.replay_episodes),
            M.SIL_ADVANTAGE: float(measured.mean()) if len(measured) else 0.0}
