"""`flywheel dpo`: Direct Preference Optimization on reflection pairs (UI-TARS section 4.5, "Agent DPO").

Reads flywheel.pairs.v1 (error-correction and post-reflection pairs, producers.annotate) and
improves a published policy, pixel or language, so that at each pair's state the annotator's
action becomes more likely than the agent's, relative to the reference pi_SFT:

    L = -log sigmoid(beta * ((log pi(chosen|s) - log pi(rejected|s)) - (log pi_SFT(chosen|s) - log pi_SFT(rejected|s))))

The reference is a published version (``--reference-version``, default the latest): its weights
are the starting point and its log-probs of every pair are computed once, before the first update,
so it stays frozen by construction. Each epoch's loss, reward margin and accuracy go to
flywheel.metrics.v1; the result is published as the next version of the policy, parented on the
reference, through infra.runtime.versions (the rollout workers and the PPO trainer pick it up).

Delivery: a snapshot read, like trainer.sft.bc. The topic is read from its beginning to the end it had
at start with a throw-away group that never commits; a pair annotated twice (same id: episode,
kind, annotator) counts once; an undecodable record goes to flywheel.dlq.v1 (its dead letter's
id is its source offset, so a re-run's copy dedupes). The version is announced only after its
weights are in the blob store.
"""

from __future__ import annotations

import logging
import random
import time
from collections import Counter
from typing import Any, Callable, Iterable

import torch
import torch.nn.functional as F

from infra.runtime import versions
from infra.runtime.config import ConfigError, describe
from infra.runtime.dlq import read_snapshot
from infra.runtime.kafka_clients import DeliveryTracker, make_producer
from infra.runtime.policy import load_policy_version
from infra.runtime.settings import Settings
from infra.runtime.topics import TOPICS
from schemas.base import now
from schemas.blobs import BlobStore
from schemas.events import PreferencePair, TrainerMetrics
from trainer.core import metric_names as M
from trainer.rl.config import check_device
from trainer.dpo.config import DPOConfig
from trainer.dpo.inputs import pair_inputs
from trainer.core.publish import make_version, publish_metrics, save_weights
from trainer.rl.update import make_optimizer

log = logging.getLogger("flywheel.dpo")
STAGE = "dpo"


# ---------------------------------------------------------------- the maths


def dpo_loss(logp_chosen: torch.Tensor, logp_rejected: torch.Tensor, ref_chosen: torch.Tensor,
             ref_rejected: torch.Tensor, beta: float, chosen_tokens: torch.Tensor | None = None,
             nll_weight: float = 0.0) -> tuple[torch.Tensor, dict[str, float]]:
    """DPO (Rafailov et al. 2023) on N pairs, each argument [N] (sums of log-probs of one side).

    With ``nll_weight`` > 0, plus that weight times the chosen side's mean per-token negative
    log-likelihood (``-logp_chosen / chosen_tokens``): DPO with an NLL term (RPO, Pang et al.
    2024, "Iterative Reasoning Preference Optimization"), which keeps the annotator's action
    likely while the margin grows, where plain DPO may widen the margin by pushing both sides
    down.

    Returns the mean loss and, as floats under their trainer.core.metric_names: the loss, the implicit
    rewards ``beta * (log pi - log pi_ref)`` of each side (means), their margin (chosen minus
    rejected), the share of pairs whose margin is positive (accuracy) and, with the NLL term, the
    chosen side's per-token NLL.
    """
    chosen = beta * (logp_chosen - ref_chosen)
    rejected = beta * (logp_rejected - ref_rejected)
    margin = chosen - rejected
    loss = -F.logsigmoid(margin).mean()
    stats = {M.DPO_REWARD_MARGIN: float(margin.detach().mean()),
             M.DPO_ACCURACY: float((margin.detach() > 0).float().mean()),
             M.DPO_CHOSEN_REWARD: float(chosen.detach().mean()),
             M.DPO_REJECTED_REWARD: float(rejected.detach().mean())}
    if nll_weight > 0:
        if chosen_tokens is None:
            raise ValueError("the NLL term needs each chosen side's token count")
        nll = (-logp_chosen / chosen_tokens.clamp(min=1)).mean()
        loss = loss + nll_weight * nll
        stats[M.DPO_CHOSEN_NLL] = float(nll.detach())
    return loss, {M.DPO_LOSS: float(loss.detach()), **stats}


@torch.no_grad()
def reference_logprobs(policy, data, batch: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    """log pi_ref of each pair's chosen and rejected side [N], with the weights ``policy`` has now."""
    policy.eval()
    parts = [data.logprobs(policy, list(range(i, min(i + batch, len(data))))) for i in range(0, len(data), batch)]
    return torch.cat([c for c, _ in parts]), torch.cat([r for _, r in parts])


def dpo_train(policy, data, ref_chosen: torch.Tensor, ref_rejected: torch.Tensor, beta: float, epochs: int,
              lr: float, minibatch_size: int, seed: int = 0, micro_batch: int = 0,
              head_lr_mult: float = 1.0, nll_weight: float = 0.0,
              on_epoch: Callable[[int], None] | None = None) -> list[dict[str, float]]:
    """Minimise the DPO loss over ``data`` (trainer.dpo.inputs); per epoch, the pair-weighted mean
    of each ``dpo_loss`` statistic. One optimiser step per minibatch; its gradient is accumulated
    over passes of ``micro_batch`` pairs (0: the whole minibatch in one pass). Each pass's mean
    loss is weighted by its share of the minibatch, so the step is the same as in one pass (a
    language policy's 32 pairs in one pass took 20 GB and the kernel killed the job). The
    optimiser is PPO's (trainer.rl.update.make_optimizer): with ``head_lr_mult`` != 1 the parts a
    policy trains from scratch step at that multiple of ``lr``. ``nll_weight``: see dpo_loss.
    ``on_epoch(n)`` is called after the n-th epoch (from 1), the policy still in train mode."""
    optimizer = make_optimizer(policy, lr, head_lr_mult)
    gen = torch.Generator().manual_seed(seed)
    n, history = len(data), []
    policy.train()
    for _ in range(epochs):
        totals: Counter = Counter()
        for idx in torch.randperm(n, generator=gen).split(minibatch_size):
            optimizer.zero_grad(set_to_none=True)
            for part in idx.split(micro_batch or len(idx)):
                logp_c, logp_r = data.logprobs(policy, part.tolist())
                loss, stats = dpo_loss(logp_c, logp_r, ref_chosen[part], ref_rejected[part], beta,
                                       data.chosen_tokens(part.tolist()) if nll_weight else None, nll_weight)
                (loss * (len(part) / len(idx))).backward()
                for k, v in stats.items():
                    totals[k] += v * len(part)
            torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
            optimizer.step()
        history.append({k: v / n for k, v in totals.items()})
        log.info("epoch %d/%d: loss %.4f, reward margin %.4f, accuracy %.2f", len(history), epochs,
                 history[-1][M.DPO_LOSS], history[-1][M.DPO_REWARD_MARGIN], history[-1][M.DPO_ACCURACY])
        if on_epoch is not None:
            on_epoch(len(history))
    policy.eval()
    return history


# ---------------------------------------------------------------- which pairs


def select_pairs(records: Iterable[PreferencePair], kinds: list[str], annotators: list[str]) -> list[PreferencePair]:
    """One pair per id (the last read), of ``kinds`` and (if given) ``annotators``, in id order."""
    by_id = {p.event_id: p for p in records if p.kind in kinds and (not annotators or p.annotator in annotators)}
    return [by_id[k] for k in sorted(by_id)]


def sample_indices(total: int, n: int, seed: int) -> list[int]:
    """At most ``n`` of ``range(total)`` (0: all), drawn with ``seed``, in increasing order."""
    if n <= 0 or total <= n:
        return list(range(total))
    return sorted(random.Random(seed).sample(range(total), n))


def read_pairs(settings: Settings, timeout_s: float) -> list[PreferencePair]:
    """The pairs topic's snapshot, decoded; undecodable records dead-lettered (acknowledged)."""
    return read_snapshot(settings, TOPICS.pairs, PreferencePair, STAGE, timeout_s)


# ---------------------------------------------------------------- the job


def reference_version(settings: Settings, cfg: DPOConfig):
    if cfg.reference_version >= 0:
        return versions.history(settings, cfg.policy_name, [cfg.reference_version])[cfg.reference_version]
    pv = versions.latest(settings, cfg.policy_name)
    if pv is None:
        raise ConfigError(f"policy {cfg.policy_name!r} has no published version to start from: "
                          "publish pi_SFT first (`flywheel bc`, `flywheel sft`)")
    return pv


def run_dpo(cfg: DPOConfig, settings: Settings) -> dict[str, Any]:
    cfg.validate()
    torch.manual_seed(cfg.seed)
    if cfg.torch_threads:
        torch.set_num_threads(cfg.torch_threads)
    log.info("dpo config %s", describe(cfg))
    t0 = time.monotonic()
    store = BlobStore(settings.blob_root)
    ref = reference_version(settings, cfg)
    check_device(cfg.device, ref.kind, "flywheel dpo")
    pairs = select_pairs(read_pairs(settings, cfg.read_timeout_s), cfg.kinds, cfg.annotators)
    policy = load_policy_version(ref, store).to(cfg.device)  # starts as pi_SFT
    data, skipped = pair_inputs(policy, pairs, store)
    if data is None:
        raise ConfigError(f"no pair {cfg.policy_name} v{ref.version} can learn from among {len(pairs)} "
                          f"(skipped: {dict(skipped) or 'none on the topic'}); run `flywheel annotate` first")
    usable = len(data)
    data = data.subset(sample_indices(usable, cfg.max_pairs, cfg.seed))  # a sample of the usable pairs
    ref_c, ref_r = reference_logprobs(policy, data)
    log.info("DPO of %s v%d (%s) on %d pairs (skipped %s), beta %g", ref.policy, ref.version, ref.kind, len(data),
             dict(skipped), cfg.beta)
    lr = cfg.learning_rate(policy.kind)
    history = dpo_train(policy, data, ref_c, ref_r, cfg.beta, cfg.epochs, lr, cfg.minibatch_size, cfg.seed,
                        cfg.passes(policy.kind), cfg.head_lr_mult, cfg.nll_weight)
    policy.version = versions.next_version(settings, cfg.policy_name, ref.version)
    run_id = cfg.run_id or f"dpo-{cfg.policy_name}-v{policy.version}"
    producer, tracker = make_producer(settings), DeliveryTracker()
    for epoch, stats in enumerate(history):
        publish_metrics(producer, tracker, settings, TrainerMetrics(
            run_id=run_id, update=epoch, policy=cfg.policy_name, policy_version=policy.version, ts=now(),
            metrics={**stats, M.PAIRS: float(len(data))}))
    pv = make_version(policy, save_weights(policy, store), parent=ref.version,
                      metrics={**history[-1], M.PAIRS: float(len(data)), M.DPO_BETA: cfg.beta})
    versions.publish(producer, tracker, settings, pv)
    return {"version": pv.version, "reference": ref.version, "kind": ref.kind, "pairs": len(data),
            "selected": dict(Counter(p.kind for p in pairs)), "usable": usable, "skipped": dict(skipped), "first": history[0],
            "last": history[-1], "run_id": run_id, "seconds": time.monotonic() - t0}
