"""The streaming PPO trainer: flywheel.rl.v1 in, policy versions and metrics out.

UI-TARS-2's partially-filled rollout pool: scored trajectories accumulate until ``min_batch``
complete ones are ready (or the oldest has waited ``max_wait_s``); trajectories more than
``max_staleness`` versions old are dropped and counted; one PPO update follows, then a new
version is published that the rollout workers hot-reload while they keep running.

Delivery guarantee: every trajectory is trained on exactly once across crashes, replays and
re-scoring. After each update the dead letters of the batch are acknowledged, then the checkpoint
(weights, optimiser, policy version, the PolicyVersion to announce, the next offset of every
(topic, partition), the ledger of episodes trained on) is written atomically; only then is the
version announced and are the offsets committed to Kafka. On start the consumer seeks to the
checkpoint's offsets, not the group's, and re-announces a version the topic does not have yet.
A crash before the checkpoint loses nothing (the batch is read again); a crash after it repeats
nothing (the checkpoint's offsets are past the batch). A copy of an episode that arrives again
(an at-least-once replay upstream, a rebalance) is skipped by the ledger (trainer.ledger); a
record scored by another scorer than ``cfg.scorer`` (e.g. a `flywheel rescore` run) is skipped.

On N ranks (``group``, trainer.distributed) this loop is rank 0's and stays as it is: rank 0
alone reads, checkpoints, announces and commits; only the update is shared with the other ranks,
so the guarantee above holds whichever rank is killed.
"""

from __future__ import annotations

import io
import logging
import os
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import torch
from confluent_kafka import OFFSET_STORED, TopicPartition
from PIL import Image

from infra.config import describe
from infra.dlq import dead_letter, send_dead_letter
from infra.kafka import DeliveryTracker, flush_or_raise, make_consumer, make_producer
from infra.settings import Settings
from infra.topics import TOPICS, topic_name
from schemas.base import now
from schemas.blobs import BlobNotFound, BlobStore
from schemas.codec import DecodeError, decode
from schemas.events import PolicyVersion, ScoredTrajectory, TrainerMetrics
from trainer import distributed, ppo
from trainer import metric_names as M
from trainer.config import TrainConfig
from trainer.ledger import TrainedLedger
from infra.policy import build_policy, load_policy_version
from infra import versions
from trainer.publish import make_version, publish_metrics, save_weights
from trainer.update import EpisodeSample, collate, ppo_update

log = logging.getLogger("flywheel.trainer")
STAGE = "trainer"


# ---------------------------------------------------------------- checkpoint


def checkpoint_path(settings: Settings, policy_name: str) -> Path:
    return settings.data_path / "checkpoints" / policy_name / "checkpoint.pt"


def save_checkpoint(path: Path, state: dict[str, Any]) -> None:
    """Atomic: write a temporary file, fsync, rename over the old one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp-{os.getpid()}")
    with open(tmp, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def load_checkpoint(path: Path) -> dict[str, Any] | None:
    return torch.load(path, weights_only=False) if path.exists() else None


# ---------------------------------------------------------------- helpers


def to_episode(scored: ScoredTrajectory, policy, store: BlobStore) -> EpisodeSample:
    """A scored trajectory as training data; ValueError when this policy cannot train on it."""
    traj = scored.trajectory
    if not traj.steps:
        raise ValueError("trajectory has no steps")
    images, actions = [], []
    for step in traj.steps:
        if not policy.can_represent(step.action):
            raise ValueError(f"step {step.step_index}: action {step.action!r} is outside this policy's action space")
        if not hasattr(policy, "step_inputs"):
            png = store.get(step.observation.screenshot.sha256)
            images.append(policy.preprocess(np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))))
        actions.append(step.action)
    if hasattr(policy, "step_inputs"):  # a step is more than its screenshot (the LM: its whole context)
        images = policy.step_inputs(traj, store)
    rewards = [0.0] * len(traj.steps)
    rewards[-1] = scored.reward  # the scored (outcome + shaping) reward arrives at the end
    return EpisodeSample(
        episode_id=traj.episode_id, images=images, instructions=[s.observation.instruction for s in traj.steps],
        actions=actions, logprobs=[s.logprob for s in traj.steps], rewards=rewards,
        policy_version=traj.policy_versions[0],
        thought_chars=float(np.mean([len(s.thought) for s in traj.steps])),
        # the step budget or timeout cut it short: not a terminal state, GAE bootstraps there
        truncated=traj.end_reason in ("step_budget", "timeout"),
        bootstrap_input=policy.bootstrap_input(traj, store) if hasattr(policy, "bootstrap_input")
        and traj.end_reason in ("step_budget", "timeout") else None,
    )


def start_policy(cfg: TrainConfig, settings: Settings, store: BlobStore, producer, tracker) -> tuple[Any, torch.optim.Optimizer, dict]:
    """Resume from the checkpoint; else continue the last published version; else publish a
    random init as version 0 first, so rollout workers can start."""
    path = checkpoint_path(settings, cfg.policy_name)
    state = load_checkpoint(path)
    if state is not None:
        policy = build_policy(cfg.policy_kind, cfg.policy_name, state["config"])
        policy.load_state_dict(state["weights"])
        policy.version = state["version"]
        optimizer = torch.optim.Adam(policy.parameters(), lr=cfg.lr)
        optimizer.load_state_dict(state["optimizer"])
        pv = PolicyVersion.model_validate(state["pv"])
        published = versions.latest(settings, cfg.policy_name)
        if published is None or published.version < pv.version:  # crashed between checkpoint and announce
            versions.publish(producer, tracker, settings, pv)
        log.info("resumed %s v%d from %s at offsets %s", cfg.policy_name, policy.version, path, state["offsets"])
        return policy, optimizer, state
    published = versions.latest(settings, cfg.policy_name)
    if published is not None:
        policy = load_policy_version(published, store)
        log.info("continuing from published %s v%d", cfg.policy_name, policy.version)
    else:
        policy = build_policy(cfg.policy_kind, cfg.policy_name, cfg.policy_overrides())
    optimizer = torch.optim.Adam(policy.parameters(), lr=cfg.lr)
    pv = published or make_version(policy, save_weights(policy, store), parent=None)
    state = {"version": policy.version, "config": policy.config_dict(), "pv": pv.model_dump(mode="json"),
             "offsets": {}, "trained": TrainedLedger().to_dict(), "counts": {}, "vp_losses": [], "vp_evs": [], "updates": 0}
    save_checkpoint(path, {**state, "weights": policy.state_dict(), "optimizer": optimizer.state_dict()})
    if published is None:
        versions.publish(producer, tracker, settings, pv)
        log.info("published random init %s v0", cfg.policy_name)
    return policy, optimizer, state


# ---------------------------------------------------------------- the loop


def train(cfg: TrainConfig, settings: Settings, stop: threading.Event | None = None,
          group: distributed.Group | None = None) -> dict[str, Any]:
    cfg.validate()
    stop = stop or threading.Event()
    torch.manual_seed(cfg.seed)
    if cfg.torch_threads:
        torch.set_num_threads(cfg.torch_threads)
    log.info("trainer config %s", describe(cfg))
    store = BlobStore(settings.blob_root)
    producer, tracker = make_producer(settings), DeliveryTracker()
    run_id = cfg.run_id or f"{cfg.policy_name}-{int(now())}"
    rl_topic = topic_name(TOPICS.rl, settings)
    path = checkpoint_path(settings, cfg.policy_name)
    policy, optimizer, state = start_policy(cfg, settings, store, producer, tracker)
    if group is not None:  # the other ranks start from the same weights and optimiser
        distributed.share_start(group, cfg, policy, optimizer)
    criterion = ppo.ValuePretrainCriterion(cfg.value_pretrain_min_ev, cfg.value_pretrain_rel_tol,
                                           cfg.value_pretrain_patience, cfg.value_pretrain_max_batches)

    def seek_to_checkpoint(consumer, partitions):
        # the checkpoint's offsets win over the group's: they match the weights we hold
        for p in partitions:
            p.offset = state["offsets"].get(p.topic, {}).get(p.partition, OFFSET_STORED)
        consumer.assign(partitions)

    consumer = make_consumer(settings, cfg.group_id or f"trainer-{cfg.policy_name}",
                             **{"session.timeout.ms": int(cfg.session_timeout_s * 1000)})
    consumer.subscribe([rl_topic], on_assign=seek_to_checkpoint)
    pool: list[EpisodeSample] = []
    offsets: dict[int, int] = dict(state["offsets"].get(rl_topic, {}))
    ledger = TrainedLedger.from_dict(state["trained"])
    counts: Counter[str] = Counter(state["counts"])
    first_at: float | None = None  # when the oldest pooled (or uncommitted) record arrived
    stale_before = counts["stale_dropped"]
    started, idle = time.monotonic(), 0.0
    try:
        while not stop.is_set() and not (cfg.max_updates and state["updates"] >= cfg.max_updates):
            # 1. fill the pool (the time spent waiting here is the trainer's idle time)
            t_wait = time.monotonic()
            msgs = consumer.consume(num_messages=max(cfg.min_batch - len(pool), 1), timeout=cfg.poll_s)
            idle += time.monotonic() - t_wait
            for msg in msgs:
                if msg.error():
                    log.warning("consumer error: %s", msg.error())
                    continue
                offsets[msg.partition()] = msg.offset() + 1
                first_at = first_at or time.monotonic()
                try:
                    scored = decode(msg.value(), ScoredTrajectory)
                    if scored.trajectory.policy != cfg.policy_name or not scored.rl_eligible:
                        counts["skipped_other_policy"] += 1
                        continue
                    if scored.scorer != cfg.scorer:
                        counts["skipped_other_scorer"] += 1
                        continue
                    if scored.episode_id in ledger or any(e.episode_id == scored.episode_id for e in pool):
                        counts["duplicates_skipped"] += 1
                        continue
                    if versions.is_stale(policy.version, scored.trajectory.policy_versions[0], settings.max_staleness):
                        # dropped on arrival, before its screenshots are decoded: a trainer that fell
                        # behind catches up cheaply, and the pool holds only trainable data, so an
                        # update waits for min_batch fresh trajectories instead of training on the few
                        # that survived a stale backlog
                        counts["stale_dropped"] += 1
                        continue
                    pool.append(to_episode(scored, policy, store))
                except (DecodeError, ValueError, BlobNotFound) as exc:
                    counts["dead_lettered"] += 1
                    send_dead_letter(producer, settings, dead_letter(STAGE, exc, rl_topic, msg.partition(), msg.offset(),
                                                                     msg.key(), msg.value()), msg.key(), on_delivery=tracker)
            waited = time.monotonic() - first_at if first_at else 0.0
            if len(pool) < cfg.min_batch and waited < cfg.max_wait_s:
                if group is not None:
                    distributed.keep_alive(group)
                continue

            # 2. drop stale trajectories (the version has not moved since they were pooled: a no-op
            # kept as the invariant's statement), then one PPO (or critic-only) update
            kept, dropped = ppo.filter_stale(pool, policy.version, settings.max_staleness, version_of=lambda e: e.policy_version)
            counts["stale_dropped"] += dropped
            dropped = counts["stale_dropped"] - stale_before  # since the last update, on arrival or here
            metrics: dict[str, float] = {}
            if kept:
                critic_only = not ppo.value_pretrain_done(state["vp_losses"], state["vp_evs"], criterion)
                staleness = [policy.version - e.policy_version for e in kept]
                metrics = ppo_update(policy, optimizer, collate(kept), cfg, critic_only=critic_only) if group is None \
                    else distributed.lead_update(group, policy, optimizer, collate(kept), cfg, critic_only)
                if critic_only:  # the acting policy is unchanged: no new version
                    state["vp_losses"].append(metrics[M.VALUE_LOSS])
                    state["vp_evs"].append(metrics[M.EXPLAINED_VARIANCE])
                else:
                    policy.version = versions.next_version(settings, cfg.policy_name, policy.version)
                metrics.update({M.STALENESS_MEAN: float(np.mean(staleness)), M.STALENESS_MAX: float(max(staleness)),
                                M.THOUGHT_LENGTH: float(np.mean([e.thought_chars for e in kept]))})
                for e in kept:
                    ledger.add(e.episode_id, e.policy_version)
                ledger.prune(policy.version, settings.max_staleness)
                state["updates"] += 1
            wall = time.monotonic() - started
            metrics.update({M.IDLE_FRACTION: idle / max(wall, 1e-9),
                            M.STALE_DROPPED_TOTAL: float(counts["stale_dropped"]),
                            M.DEAD_LETTERED_TOTAL: float(counts["dead_lettered"]),
                            M.DUPLICATES_SKIPPED_TOTAL: float(counts["duplicates_skipped"]),
                            M.TRAINED_TOTAL: float(ledger.total)})

            # 3. dead letters acknowledged, checkpoint (the point of no return), announce, commit offsets
            flush_or_raise(producer, tracker)  # a dead letter is never lost behind a checkpointed offset
            new_version = policy.version != state["version"]
            if new_version:
                pv = make_version(policy, save_weights(policy, store), parent=state["version"], metrics=metrics)
                state.update(version=policy.version, pv=pv.model_dump(mode="json"))
            state.update(offsets={rl_topic: dict(offsets)}, counts=dict(counts), trained=ledger.to_dict())
            save_checkpoint(path, {**state, "weights": policy.state_dict(), "optimizer": optimizer.state_dict()})
            if new_version:
                versions.publish(producer, tracker, settings, pv)
            if kept:
                publish_metrics(producer, tracker, settings, TrainerMetrics(
                    run_id=run_id, update=state["updates"], policy=cfg.policy_name, policy_version=policy.version,
                    ts=now(), metrics={k: float(v) for k, v in metrics.items() if v == v}))
            consumer.commit(offsets=[TopicPartition(rl_topic, p, o) for p, o in offsets.items()], asynchronous=False)
            log.info("update %d -> v%d: %d trajectories (%d stale dropped) reward %.3f entropy %.3f idle %.2f",
                     state["updates"], policy.version, len(kept), dropped, metrics.get(M.REWARD_MEAN, float("nan")),
                     metrics.get(M.ENTROPY, float("nan")), metrics[M.IDLE_FRACTION])
            pool, first_at, stale_before = [], None, counts["stale_dropped"]
    finally:
        consumer.close()
        producer.flush(10)
    if group is not None:  # a clean stop; after a failure the followers fail on their own
        distributed.release(group)
    wall = time.monotonic() - started
    return {"version": policy.version, "updates": state["updates"], "trained": ledger.total,
            "idle_fraction": idle / max(wall, 1e-9), "counts": dict(counts)}
