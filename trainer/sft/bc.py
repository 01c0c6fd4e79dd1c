"""Behaviour cloning on flywheel.sft.v1: the cold start's SFT (UI-TARS-2), for any policy kind:
the kind's plug-in clones (``PolicyKind.clone``); a kind that keeps the default clones here by
maximum likelihood of every step (``clone_steps``), the language policy in trainer.policies.lm.bc.

The scripted solvers play the annotators: their episodes go through the normal pipeline
(rollout with the scripted backend -> steps -> trajectories -> scored V(s) = 1 -> flywheel.sft.v1).
``flywheel bc`` takes at most ``demos_per_task`` successful demonstrations of each task of a
suite (WGE used 10; ``demos_from``: only those of some policies, e.g. ``human`` for the
Annotate view's, producers.human), trains the policy to imitate every step (maximum likelihood of the
demonstrated action given the screenshot and the earlier actions, through the same ``evaluate``
PPO uses) and publishes the result, pi_sft, as the next version of ``policy_name``; the PPO
trainer and the rollout workers pick it up from flywheel.policy.v1.

Delivery: a snapshot read. The topic is read from its beginning to the end offsets it had at
start with a throw-away consumer group that never commits, so a re-run trains on the same
demonstrations (selection is deterministic: per task, the first by episode id). An undecodable
record goes to flywheel.dlq.v1 (its dead letter's id is its source offset, so a re-run's copy
dedupes); a demonstration this policy cannot represent (another policy's action space) is
skipped and counted. pi_sft is announced only after its weights are in the blob store: a crash
before that announces nothing.
"""

from __future__ import annotations

import logging
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import torch

from infra.runtime import versions
from infra.runtime.config import ConfigError, describe
from infra.runtime.dlq import read_snapshot
from infra.runtime.kafka_clients import DeliveryTracker, make_producer
from infra.runtime.policy import build_policy, policy_kind
from infra.runtime.settings import Settings
from infra.runtime.topics import TOPICS
from producers.suites import get_suite
from trainer.core import metric_names as M
from trainer.sft.bc_config import BCConfig
from schemas.blobs import BlobNotFound, BlobStore
from schemas.events import ScoredTrajectory
from trainer.core.publish import make_version, save_weights
from trainer.policies.base import Cloned

log = logging.getLogger("flywheel.bc")
STAGE = "bc"


@dataclass
class Examples:
    """Every demonstrated step, as the policy sees it: obs [N, C + 3 (+ 1), 8G, 8G] uint8 and N of the rest."""

    obs: torch.Tensor
    instructions: list[str]
    actions: list[Any]
    tasks: list[str]
    skipped: Counter = field(default_factory=Counter)


# ---------------------------------------------------------------- pure functions


def demonstrated_by(policy: str, sources: Iterable[str]) -> bool:
    """Whether a trajectory of ``policy`` is a demonstration from ``sources`` (none: from anyone).
    A source is a policy's name or its family: ``human`` takes every ``human:<name>`` (the
    Annotate view's people, producers.human), ``human:alice`` only hers."""
    sources = list(sources)
    return not sources or any(policy == s or policy.startswith(s + ":") for s in sources)


def select_demos(records: Iterable[ScoredTrajectory], tasks: list[str], per_task: int,
                 sources: Iterable[str] = ()) -> list[ScoredTrajectory]:
    """V(s) = 1 trajectories of ``tasks`` by ``sources`` (``demonstrated_by``; a task judged at its
    end is V(s) = 1 only when it succeeded, a game from the scorer's normalised score on), one per
    episode, at most ``per_task`` per task: the first by episode id, so the choice does not depend
    on partition order."""
    sources = list(sources)
    by_task: dict[str, dict[str, ScoredTrajectory]] = defaultdict(dict)
    for s in records:
        t = s.trajectory
        if s.verdict == 1 and t.steps and t.task.name in tasks and demonstrated_by(t.policy, sources):
            by_task[t.task.name].setdefault(t.episode_id, s)
    return [by_task[name][eid] for name in tasks for eid in sorted(by_task[name])[:per_task]]


def examples(policy, demos: list[ScoredTrajectory], store: BlobStore,
             cache: dict[str, list[torch.Tensor]] | None = None) -> Examples:
    """Every step of every demonstration the policy can represent, with its history, but for a
    demonstration's injected noise (``Trajectory.noise_steps``: counted, not imitated). ``cache``
    (episode id -> step inputs, for this policy's preprocessing) spares a repeated call reading
    and preprocessing the screenshots again; it is left holding this call's episodes only."""
    obs, instructions, actions, tasks, skipped = [], [], [], [], Counter()
    kept: dict[str, list[torch.Tensor]] = {}
    for s in demos:
        t = s.trajectory
        inputs = cache.get(t.episode_id) if cache is not None else None
        try:
            inputs = inputs if inputs is not None else policy.step_inputs(t, store)
        except ValueError as exc:  # an action outside this policy's heads: not for this policy
            skipped[f"unrepresentable:{t.task.name}"] += 1
            log.debug("skipping %s: %s", t.episode_id, exc)
            continue
        except BlobNotFound:
            skipped["screenshot_missing"] += 1
            continue
        kept[t.episode_id] = inputs
        noise = set(t.noise_steps)  # in the history, not imitated
        if noise:
            skipped["noise_steps"] += len(noise)
        taught = [i for i, st in enumerate(t.steps) if st.step_index not in noise]
        obs += [inputs[i] for i in taught]
        instructions += [t.steps[i].observation.instruction for i in taught]
        actions += [t.steps[i].action for i in taught]
        tasks += [t.task.name] * len(taught)
    if cache is not None:
        cache.clear()
        cache.update(kept)
    if not obs:
        raise ConfigError(f"no demonstration this policy can learn from (skipped: {dict(skipped) or 'none found'})")
    return Examples(torch.stack(obs), instructions, actions, tasks, skipped)


def bc_train(policy, data: Examples, epochs: int, lr: float, minibatch_size: int, seed: int = 0,
             budget_s: float = 0.0) -> list[float]:
    """Minimise the demonstrated actions' negative log-likelihood; returns the mean loss per epoch.
    ``budget_s`` > 0: no epoch starts once training has taken that long (the first always runs)."""
    optimizer = torch.optim.Adam(policy.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(seed)
    n, losses = len(data.actions), []
    policy.train()
    t0 = time.monotonic()
    for _ in range(epochs):
        if losses and over_budget(t0, budget_s):
            log.info("stopping after %d of %d epochs: the %.0f s training budget is spent", len(losses), epochs, budget_s)
            break
        total = 0.0
        for idx in torch.randperm(n, generator=gen).split(minibatch_size):
            ids = idx.tolist()
            logprob, _, _ = policy.evaluate(data.obs[idx], [data.instructions[i] for i in ids], [data.actions[i] for i in ids])
            loss = -logprob.mean()
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if torch.isfinite(torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)):
                optimizer.step()  # a non-finite gradient is skipped, as PPO's update skips it
            total += float(loss.detach()) * len(ids)
        losses.append(total / n)
        log.info("epoch %d of %d: loss %.4f", len(losses), epochs, losses[-1])
    policy.eval()
    return losses


def over_budget(t0: float, budget_s: float) -> bool:
    """Whether training that began at ``t0`` (time.monotonic) has used ``budget_s`` (0: no budget)."""
    return budget_s > 0 and time.monotonic() - t0 >= budget_s


def train_budget(budget_s: float, prep_s: float) -> float:
    """The training budget left once the demonstrations were read and preprocessed (``prep_s``):
    the demo's budget counts from the job's start (its deadline kills the job), and preprocessing
    grows with the steps (10,290 steps of the default suite and the games together: past the
    budget before any epoch ended, and the job was stopped). 0 stays no budget; a spent one lets
    the first epoch alone run."""
    return 0.0 if budget_s <= 0 else max(budget_s - prep_s, 1e-9)


def clone_steps(policy, demos: list[ScoredTrajectory], store: BlobStore, cfg: BCConfig,
                match: Callable[[Any, Examples], dict[str, float]] | None = None) -> Cloned:
    """Behaviour cloning by maximum likelihood of every demonstrated step (``examples``,
    ``bc_train``) at the kind's or ``cfg``'s epochs, learning rate and minibatch size; ``match``
    (policy, examples -> greedy match per task and ``all``) checks the result."""
    t0 = time.monotonic()
    data = examples(policy, demos, store)
    prep_s = time.monotonic() - t0
    log.info("read and preprocessed %d steps in %.0f s", len(data.actions), prep_s)
    losses = bc_train(policy, data, cfg.epochs_for(policy.kind), cfg.lr_for(policy.kind),
                      cfg.minibatch_for(policy.kind), cfg.seed, budget_s=train_budget(cfg.train_budget_s, prep_s))
    metrics = {M.BC_LOSS: losses[-1], M.DEMOS: float(len(demos)), M.STEPS: float(len(data.actions))}
    train_match = match(policy, data) if match is not None else {}
    if train_match:
        metrics[M.BC_TRAIN_MATCH] = train_match["all"]
    return Cloned(losses, metrics, train_match, dict(data.skipped))


# ---------------------------------------------------------------- the job


def read_demonstrations(settings: Settings, cfg: BCConfig) -> list[ScoredTrajectory]:
    return read_sft(settings, STAGE, cfg.read_timeout_s)


def read_sft(settings: Settings, stage: str, timeout_s: float = 60.0) -> list[ScoredTrajectory]:
    """The sft topic's snapshot, decoded; undecodable records dead-lettered by ``stage`` (acknowledged)."""
    return read_snapshot(settings, TOPICS.sft, ScoredTrajectory, stage, timeout_s)


def run_bc(cfg: BCConfig, settings: Settings) -> dict[str, Any]:
    cfg.validate()
    torch.manual_seed(cfg.seed)
    if cfg.torch_threads:
        torch.set_num_threads(cfg.torch_threads)
    log.info("bc config %s", describe(cfg))
    t0 = time.monotonic()
    tasks = cfg.tasks or list(get_suite(cfg.suite).tasks)
    demos = select_demos(read_demonstrations(settings, cfg), tasks, cfg.demos_per_task, cfg.demos_from)
    store = BlobStore(settings.blob_root)
    policy = build_policy(cfg.policy_kind, cfg.policy_name, cfg.policy_overrides())
    per_task = Counter(s.trajectory.task.name for s in demos)
    noise = sum(len(s.trajectory.noise_steps) for s in demos)
    steps = sum(len(s.trajectory.steps) for s in demos) - noise  # the labels; a noise step is history only
    log.info("behaviour cloning on %d demonstrations (%d steps%s): %s", len(demos), steps,
             f", {noise} noise steps not imitated" if noise else "", dict(per_task))
    if not demos:
        by = f" by {', '.join(cfg.demos_from)}" if cfg.demos_from else ""
        raise ConfigError(f"no demonstration of {', '.join(tasks)}{by} on the sft topic")
    out = policy_kind(cfg.policy_kind).clone(policy.to(cfg.device), demos, store, cfg)  # published from the CPU (save_weights)
    published = versions.latest(settings, cfg.policy_name)
    policy.version = versions.next_version(settings, cfg.policy_name, -1)
    pv = make_version(policy, save_weights(policy, store), parent=published.version if published else None,
                      metrics=out.metrics)
    producer, tracker = make_producer(settings), DeliveryTracker()
    versions.publish(producer, tracker, settings, pv)
    return {"version": pv.version, "demos": dict(per_task), "steps": steps, "loss": out.losses[-1],
            "train_match": out.train_match, "skipped": out.skipped, "missing": [t for t in tasks if t not in per_task],
            "seconds": time.monotonic() - t0}
