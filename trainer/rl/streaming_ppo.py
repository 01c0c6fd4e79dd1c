"""The streaming PPO trainer: flywheel.rl.v1 in, policy versions and metrics out.

UI-TARS-2's partially-filled rollout pool: scored trajectories accumulate until ``min_batch``
complete ones are ready, or they hold ``max_batch_steps`` steps (a pool of long game episodes
keeps its preprocessed inputs bounded), or the oldest has waited ``max_wait_s``; the update cuts
episodes longer than ``chunk_steps`` into chunks (trainer.rl.chunks); trajectories more than
``max_staleness`` versions old are dropped and counted; one PPO update follows, then a new
version is published that the rollout workers hot-reload while they keep running.

The trainer is a stage of the one checkpointed consume loop (``infra.runtime.consume_loop``) with a
``CheckpointFile`` (``trainer.core.learner``): ``add`` decodes, filters and pools a record, ``ready``
says a batch is full, ``flush`` runs the update on the pool and writes the weights file,
``committed`` announces the version and publishes the metrics.

Delivery guarantee: every trajectory is trained on exactly once across crashes, replays and
re-scoring. After each update the dead letters of the batch are acknowledged, then the checkpoint
(the next offset of every (topic, partition), the typed state naming the weights + optimiser
file and the PolicyVersion to announce, the ids of the episodes trained on) is written
atomically; only then is the version announced (and the group's offsets committed, for lag
monitoring). On start the consumer seeks to the checkpoint's offsets, not the group's, and
announces a version the crash left unannounced. A crash before the checkpoint loses nothing (the
batch is read again); a crash after it repeats nothing (the checkpoint's offsets are past it).
A batch is ``min_batch`` pooled trajectories (or ``max_batch_steps`` steps), or what the pool
holds after ``max_wait_s`` (the loop's checkpoint interval), so no offset is ever committed past
an untrained trajectory. A copy of an episode that arrives again (an at-least-once replay upstream, a rebalance) is skipped by
the checkpoint's trained ids (``infra.runtime.checkpoint.TrainedIds``, bounded by the staleness window);
a record scored by another scorer than ``cfg.scorer`` (e.g. a `flywheel rescore` run) is skipped,
and so is a trajectory with a step not sampled from the policy (``Step.sampled`` false: greedy or
scripted), even one a scorer marked RL-eligible.

With ``rft_every`` set, every that many PPO updates are followed, inside the same update, by a
rejection-sampling fine-tuning round on flywheel.sft.v1 (trainer.sft.rft), so the guarantee above
covers it: a replay after a crash repeats the update and its round. With ``dagger_every`` set a
DAgger round (trainer.sft.dagger) follows every that many PPO updates the same way, but its
aggregate of labelled steps lives in memory: a replayed round fits the labels gathered since the
restart only.

On N ranks (``group``, trainer.rl.distributed) this loop is rank 0's and stays as it is: rank 0
alone reads, checkpoints, announces and commits; only the update is shared with the other ranks,
so the guarantee above holds whichever rank is killed.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from infra.runtime.checkpoint import load_checkpoint as load_checkpoint_file
from infra.runtime.config import ConfigError, describe
from infra.runtime.consume_loop import CheckpointFile, ConsumeLoop, DeadLetters, LoopConfig
from infra.runtime.metrics import ProcessMetrics, process_metrics, serve_metrics
from infra.runtime.kafka_clients import DeliveryTracker, flush_or_raise, make_producer
from infra.runtime.settings import Settings
from infra.runtime.topics import TOPICS, topic_name
from schemas.base import now
from schemas.blobs import BlobNotFound, BlobStore
from schemas.codec import DecodeError, decode
from schemas.events import PolicyVersion, ScoredTrajectory, TrainerMetrics
from trainer.rl import distributed
from trainer.rl import ppo
from trainer.rl.rewards import step_rewards
from trainer.core import metric_names as M
from trainer.rl.config import TrainConfig, place
from trainer.core.learner import LearnerState, checkpoint_file, drop_other_weights, read_weights, write_weights
from infra.runtime.policy import build_policy, load_policy_version, policy_kind
from infra.runtime import versions
from trainer.core.publish import make_version, publish_metrics, save_weights
from trainer.rl.update import EpisodeSample, collate, make_optimizer, ppo_update, reference_logprobs
from trainer.sft.dagger import LabelBuffer, dagger_round
from trainer.sft.rft import RFT_WINDOW, rft_round, solved_tasks

log = logging.getLogger("flywheel.trainer")
STAGE = "trainer"


# ---------------------------------------------------------------- checkpoint


def checkpoint_path(settings: Settings, policy_name: str) -> Path:
    return checkpoint_file(settings, policy_name)


def load_checkpoint(path: Path) -> dict[str, Any] | None:
    """What the checkpoint at ``path`` says, as a plain dict (for tools and tests): version,
    updates, counts, offsets, trained ({"recent", "total"}) and the learner's extra fields."""
    if not path.exists():
        return None
    ckpt = load_checkpoint_file(path, LearnerState)
    state = ckpt.state
    return {"version": state.version, "updates": state.updates, "counts": dict(state.counts),
            "offsets": ckpt.offsets, "trained": ckpt.trained.model_dump(), **state.extra}


# ---------------------------------------------------------------- helpers


def to_episode(scored: ScoredTrajectory, policy, store: BlobStore) -> EpisodeSample:
    """A scored trajectory as training data; ValueError when this policy cannot train on it."""
    traj = scored.trajectory
    if not traj.steps:
        raise ValueError("trajectory has no steps")
    for step in traj.steps:
        if not policy.can_represent(step.action):
            raise ValueError(f"step {step.step_index}: action {step.action!r} is outside this policy's action space")
    images = policy.step_inputs(traj, store)  # each step as the policy saw it (the LM: its whole context)
    actions = [step.action for step in traj.steps]
    rewards = step_rewards(scored)  # at the end; a game's score changes on the steps that made them
    return EpisodeSample(
        episode_id=traj.episode_id, images=images, instructions=[s.observation.instruction for s in traj.steps],
        actions=actions, logprobs=[s.logprob for s in traj.steps], rewards=rewards,
        policy_version=traj.policy_versions[0],
        thought_chars=float(np.mean([len(s.thought) for s in traj.steps])), task=traj.task.name, success=traj.success,
        truncated=traj.cut_short,  # a task judged at its end that ran out failed (scored so): terminal
        bootstrap_input=policy.bootstrap_input(traj, store) if traj.cut_short else None,
        experts=expert_labels(traj, policy),
    )


def expert_labels(traj, policy) -> list[Any] | None:
    """Each step's expert label the policy can be trained on (Step.expert_action), else None per
    step; None for a policy that scores only its own samples (``scores_actions``)."""
    if not policy_kind(policy.kind).scores_actions:
        return None
    return [s.expert_action if s.expert_action is not None
            and policy.can_represent(s.expert_action, s.observation.instruction) else None for s in traj.steps]


def start_policy(cfg: TrainConfig, settings: Settings, store: BlobStore,
                 ckpt: CheckpointFile) -> tuple[Any, torch.optim.Optimizer]:
    """Resume from the checkpoint; else continue the last published version; else a random init
    as version 0, which the learner announces first, so rollout workers can start."""
    folder = ckpt.path.parent
    state: LearnerState | None = ckpt.checkpoint.state
    if state is not None:
        saved = read_weights(folder, state)
        # the kind this checkpoint holds (recorded since it may differ from --policy-kind: a
        # published language policy continued without the flag); older checkpoints: the flag
        policy = build_policy(state.extra.get("kind", cfg.policy_kind), cfg.policy_name, state.config)
        policy.load_state_dict(saved["weights"])
        policy.version = state.version
        place(policy, cfg.device, "flywheel train")  # before the optimiser: its state follows its parameters' device
        optimizer = make_optimizer(policy, cfg.lr, cfg.head_lr_mult)
        try:
            optimizer.load_state_dict(saved["optimizer"])
        except ValueError as exc:  # another number of parameter groups: head_lr_mult changed
            raise ConfigError(f"the checkpoint's optimiser does not fit this config ({exc}): resume with the "
                              f"head_lr_mult it was written with, or start a new --policy-name") from None
        log.info("resumed %s v%d from %s at offsets %s", cfg.policy_name, policy.version, ckpt.path,
                 ckpt.checkpoint.offsets)
        return policy, optimizer
    published = versions.latest(settings, cfg.policy_name)
    if published is not None:
        policy = load_policy_version(published, store)
        log.info("continuing from published %s v%d", cfg.policy_name, policy.version)
    else:
        policy = build_policy(cfg.policy_kind, cfg.policy_name, cfg.policy_overrides())
    place(policy, cfg.device, "flywheel train")  # the published version's kind, whatever --policy-kind says
    optimizer = make_optimizer(policy, cfg.lr, cfg.head_lr_mult)
    pv = published or make_version(policy, save_weights(policy, store), parent=None)
    ckpt.checkpoint.state = LearnerState(version=policy.version, config=policy.config_dict(),
                                         weights_file=write_weights(folder, 0, policy, optimizer),
                                         announce=None if published else pv.model_dump(mode="json"),
                                         extra={"vp_losses": [], "vp_evs": [], "start_version": policy.version,
                                                "kind": policy.kind})
    ckpt.save()
    return policy, optimizer


SCORING_FREE_KEYS = frozenset({"seed", "max_new_tokens"})  # the start of the weights, the sampling: not the inputs


def reference_mismatch(policy, reference) -> str | None:
    """Why ``reference`` cannot score ``policy``'s steps (None: it can). It reads the policy's own
    inputs (rendered tokens, preprocessed screens), so its kind and every config key that shapes
    them must agree: another tokenizer, pointer or coordinate mode would index other tokens."""
    if reference.kind != policy.kind:
        return f"it is a {reference.kind} policy, this one is {policy.kind}"
    mine, theirs = policy.config_dict(), reference.config_dict()
    differ = sorted(k for k in set(mine) | set(theirs) if k not in SCORING_FREE_KEYS and mine.get(k) != theirs.get(k))
    return f"its config differs in {', '.join(differ)}" if differ else None


def load_reference(cfg: TrainConfig, settings: Settings, store: BlobStore, extra: dict[str, Any], policy):
    """The frozen reference policy of the KL penalty: version ``cfg.kl_ref_version``, else the
    version this trainer first started from (pi_sft after a cold start), remembered in the
    checkpoint so a restart keeps the same anchor. ConfigError when it cannot score ``policy``'s steps."""
    version = cfg.kl_ref_version if cfg.kl_ref_version >= 0 else extra.setdefault("kl_ref_version", extra.get("start_version", 0))  # kept for a restart
    reference = load_policy_version(versions.history(settings, cfg.policy_name, [version])[version], store)
    why = reference_mismatch(policy, reference)
    if why is not None:
        raise ConfigError(f"the KL reference {cfg.policy_name} v{version} cannot score this policy's steps: {why}; "
                          "name a version of the same model and config with --kl-ref-version")
    reference.requires_grad_(False)
    reference.to(cfg.device)
    log.info("KL penalty %.3g against %s v%d", cfg.kl_coef, cfg.policy_name, version)
    return reference


# ---------------------------------------------------------------- the learner (a consume-loop stage)


class PPOLearner:
    """add: decode, filter, pool; ready: min_batch pooled; flush: one PPO (or critic-only) update
    and its weights file; committed: announce the version, publish the update's metrics."""

    def __init__(self, cfg: TrainConfig, settings: Settings, store: BlobStore, ckpt: CheckpointFile, policy,
                 optimizer, stop: threading.Event, group: distributed.Group | None, run_id: str,
                 metrics: ProcessMetrics | None = None) -> None:
        self.cfg, self.settings, self.store, self.ckpt = cfg, settings, store, ckpt
        self.policy, self.optimizer, self.stop, self.group, self.run_id = policy, optimizer, stop, group, run_id
        self.producer, self.tracker = make_producer(settings), DeliveryTracker()
        self.criterion = ppo.ValuePretrainCriterion(cfg.value_pretrain_min_ev, cfg.value_pretrain_rel_tol,
                                                    cfg.value_pretrain_patience, cfg.value_pretrain_max_batches,
                                                    cfg.value_pretrain_max_s)
        self.reference = None  # the KL anchor, loaded at the first update (v0 of a fresh start is announced by then)
        self.rft_inputs: dict = {}  # RFT rounds' step inputs by episode id: preprocessed once, not every round
        # DAgger's aggregate: the labelled steps of the episodes trained on (in memory: a restart begins a new one)
        self.labels = LabelBuffer(cfg.dagger_buffer) if cfg.dagger_every else None
        self.pool: list[EpisodeSample] = []
        self.metrics: dict[str, float] | None = None  # the last update's, published once committed
        self.started, self.busy = time.monotonic(), 0.0
        self.prom = metrics if metrics is not None else process_metrics("trainer")
        self.stale_before = self.counts.get("stale_dropped", 0)
        if cfg.max_updates and self.state.updates >= cfg.max_updates:
            stop.set()

    @property
    def state(self) -> LearnerState:
        return self.ckpt.checkpoint.state

    @property
    def counts(self) -> dict[str, int]:
        return self.state.counts

    def _count(self, what: str) -> None:
        self.counts[what] = self.counts.get(what, 0) + 1
        self.prom["flywheel_trainer_trajectories_total"].labels(fate=what).inc()

    def idle_fraction(self) -> float:
        """Share of wall-clock not spent decoding or training: waiting for data."""
        wall = time.monotonic() - self.started
        return max(0.0, 1.0 - self.busy / max(wall, 1e-9))

    # ------------------------------------------------------------------ per record
    def add(self, record: Any, dlq: DeadLetters) -> None:
        t0 = time.monotonic()
        try:
            self._add(record, dlq)
        finally:
            self.busy += time.monotonic() - t0

    def _add(self, record: Any, dlq: DeadLetters) -> None:
        try:
            scored = decode(record.value(), ScoredTrajectory)
            if scored.trajectory.policy != self.cfg.policy_name:
                return self._count("skipped_other_policy")
            if not scored.rl_eligible:  # the scorer's word (a router sends none such; a replay or a hand may)
                return self._count("skipped_not_eligible")
            if scored.trajectory.unsampled_steps:  # greedy or scripted, whatever a scorer said: not PPO data
                return self._count("skipped_unsampled")
            if scored.scorer != self.cfg.scorer:
                return self._count("skipped_other_scorer")
            if scored.episode_id in self.ckpt.checkpoint.trained or any(e.episode_id == scored.episode_id for e in self.pool):
                return self._count("duplicates_skipped")
            if versions.is_stale(self.policy.version, scored.trajectory.policy_versions[0], self.settings.max_staleness):
                # dropped on arrival, before its screenshots are decoded: a trainer that fell
                # behind catches up cheaply, and the pool holds only trainable data, so an
                # update waits for min_batch fresh trajectories instead of training on the few
                # that survived a stale backlog
                return self._count("stale_dropped")
            self.pool.append(to_episode(scored, self.policy, self.store))
        except (DecodeError, ValueError, BlobNotFound) as exc:
            self._count("dead_lettered")
            dlq.send_record(exc, record)

    def ready(self) -> bool:
        steps = sum(len(e.actions) for e in self.pool)
        return len(self.pool) >= self.cfg.min_batch or steps >= self.cfg.max_batch_steps

    def tick(self) -> None:
        """Once per poll: while rank 0 waits for data, the other ranks hear from it."""
        if self.group is not None:
            distributed.keep_alive(self.group)

    # ------------------------------------------------------------------ the update (flush)
    def flush(self, dlq: DeadLetters) -> None:
        t0 = time.monotonic()
        try:
            self._flush()
        finally:
            self.busy += time.monotonic() - t0
        self.prom["flywheel_trainer_idle_fraction"].set(self.idle_fraction())

    def _flush(self) -> None:
        pool, self.pool = self.pool, []
        cfg, policy, state = self.cfg, self.policy, self.state
        # the version has not moved since these were pooled: a no-op kept as the invariant's statement
        kept, dropped = ppo.filter_stale(pool, policy.version, self.settings.max_staleness, version_of=lambda e: e.policy_version)
        self.counts["stale_dropped"] = self.counts.get("stale_dropped", 0) + dropped
        self.prom["flywheel_trainer_trajectories_total"].labels(fate="stale_dropped").inc(dropped)
        if not kept:
            return
        extra = state.extra
        # wall-clock seconds since the phase's first batch, kept in the checkpoint so a restart goes on counting
        vp_elapsed = time.time() - extra.setdefault("vp_started", time.time())
        critic_only = not ppo.value_pretrain_done(extra.setdefault("vp_losses", []), extra.setdefault("vp_evs", []),
                                                  self.criterion, vp_elapsed)
        staleness = [policy.version - e.policy_version for e in kept]
        started = time.monotonic()
        batch = collate(kept, cfg.chunk_steps)
        if cfg.kl_coef > 0 and self.reference is None:
            self.reference = load_reference(cfg, self.settings, self.store, extra, policy)
        if self.reference is not None:  # rank 0 scores the batch under the reference once; it travels with it
            batch.ref_logprob = reference_logprobs(self.reference, batch)
        metrics = ppo_update(policy, self.optimizer, batch, cfg, critic_only=critic_only) if self.group is None \
            else distributed.lead_update(self.group, policy, self.optimizer, batch, cfg, critic_only)
        if not critic_only and cfg.rft_every:
            metrics.update(self._rft_round(extra))
        if self.labels is not None:
            metrics.update(self._dagger_round(kept, extra, critic_only))
        parent = policy.version
        if critic_only:  # the acting policy is unchanged: no new version
            extra["vp_losses"].append(metrics[M.VALUE_LOSS])
            extra["vp_evs"].append(metrics[M.EXPLAINED_VARIANCE])
        else:
            policy.version = versions.next_version(self.settings, cfg.policy_name, policy.version)
        trained = self.ckpt.checkpoint.trained
        outcomes = extra.setdefault("task_outcomes", {})  # per task, the last RFT_WINDOW trained episodes' success
        for e in kept:
            trained.add(e.episode_id, e.policy_version)
            outcomes[e.task] = (outcomes.get(e.task, []) + [int(e.success)])[-RFT_WINDOW:]
        trained.prune(policy.version, self.settings.max_staleness)
        updates = state.updates + 1
        dropped = self.counts["stale_dropped"] - self.stale_before  # since the last update, on arrival or here
        self.stale_before = self.counts["stale_dropped"]
        metrics.update({M.STALENESS_MEAN: float(np.mean(staleness)), M.STALENESS_MAX: float(max(staleness)),
                        M.THOUGHT_LENGTH: float(np.mean([e.thought_chars for e in kept])),
                        M.IDLE_FRACTION: self.idle_fraction(),
                        M.STALE_DROPPED_TOTAL: float(self.counts["stale_dropped"]),
                        M.DEAD_LETTERED_TOTAL: float(self.counts.get("dead_lettered", 0)),
                        M.DUPLICATES_SKIPPED_TOTAL: float(self.counts.get("duplicates_skipped", 0)),
                        M.TRAINED_TOTAL: float(trained.total)})
        announce = state.announce
        if policy.version != parent:
            announce = make_version(policy, save_weights(policy, self.store), parent=parent, metrics=metrics).model_dump(mode="json")
        self.ckpt.checkpoint.state = state.model_copy(update={
            "version": policy.version, "updates": updates, "announce": announce,
            "weights_file": write_weights(self.ckpt.path.parent, updates, policy, self.optimizer)})
        self.metrics = metrics
        self._record_update(time.monotonic() - started, staleness)
        log.info("update %d -> v%d: %d trajectories (%d stale dropped) reward %.3f entropy %.3f idle %.2f",
                 updates, policy.version, len(kept), dropped, metrics.get(M.REWARD_MEAN, float("nan")),
                 metrics.get(M.ENTROPY, float("nan")), metrics[M.IDLE_FRACTION])
        if cfg.max_updates and updates >= cfg.max_updates:
            self.stop.set()

    def _record_update(self, seconds: float, staleness: list[int]) -> None:
        """The update on /metrics: its time, what it trained and how stale each trajectory was."""
        self.prom["flywheel_trainer_updates_total"].inc()
        self.prom["flywheel_trainer_update_seconds"].observe(seconds)
        self.prom["flywheel_trainer_trajectories_total"].labels(fate="trained").inc(len(staleness))
        for lag in staleness:
            self.prom["flywheel_trainer_staleness"].observe(lag)
        self.prom["flywheel_trainer_policy_version"].set(self.policy.version)

    def _rft_round(self, extra: dict) -> dict[str, float]:
        """Every ``rft_every``-th PPO update is followed by a rejection-sampling fine-tuning round
        (trainer.sft.rft) before its version is published; -> the round's metrics. A round that fails
        is logged and counted; the update is published without it."""

        extra["ppo_updates"] = extra.get("ppo_updates", 0) + 1
        if extra["ppo_updates"] % self.cfg.rft_every:
            return {}
        cfg = self.cfg
        try:
            return rft_round(self.policy, self.settings, self.store, cfg.policy_name, cfg.rft_per_task, cfg.rft_epochs,
                             cfg.rft_lr, seed=cfg.seed + extra["ppo_updates"], scorer=cfg.scorer,
                             cache=self.rft_inputs, solved=solved_tasks(extra.get("task_outcomes", {}), cfg.rft_solved))
        except Exception as exc:  # noqa: BLE001 - a failed round must not stop PPO (it would fail again on restart)
            self._count("rft_failed")
            log.warning("RFT round after PPO update %d failed, PPO goes on without it: %s", extra["ppo_updates"], exc)
            return {M.RFT_FAILED_TOTAL: float(self.counts["rft_failed"])}

    def _dagger_round(self, kept: list[EpisodeSample], extra: dict, critic_only: bool) -> dict[str, float]:
        """The batch's labelled steps join DAgger's aggregate (value pretraining's too: the states
        pi_sft reached); every ``dagger_every``-th PPO update is followed by a round that fits the
        policy to the aggregate (trainer.sft.dagger) before its version is published."""
        for e in kept:
            self.labels.add(e.images, e.instructions, e.experts, e.task)
        if critic_only:
            return {}
        extra["dagger_updates"] = extra.get("dagger_updates", 0) + 1
        if extra["dagger_updates"] % self.cfg.dagger_every:
            return {}
        cfg = self.cfg
        try:
            return dagger_round(self.policy, self.labels, cfg.dagger_epochs, cfg.dagger_lr,
                                policy_kind(self.policy.kind).bc_minibatch_size, seed=cfg.seed + extra["dagger_updates"],
                                sample=cfg.dagger_sample)
        except Exception as exc:  # noqa: BLE001 - as an RFT round's: PPO goes on (it would fail again on restart)
            self._count("dagger_failed")
            log.warning("DAgger round after PPO update %d failed, PPO goes on without it: %s", extra["dagger_updates"], exc)
            return {M.DAGGER_FAILED_TOTAL: float(self.counts["dagger_failed"])}

    # ------------------------------------------------------------------ after the checkpoint
    def committed(self) -> None:
        """The checkpoint is written: announce its version, publish the update's metrics."""
        state = self.state
        if state.announce is not None:
            pv = PolicyVersion.model_validate(state.announce)
            versions.publish(self.producer, self.tracker, self.settings, pv)
            self.ckpt.checkpoint.state = state.model_copy(update={"announce": None})
            self.ckpt.save()
            if pv.parent is None:
                log.info("published random init %s v%d", pv.policy, pv.version)
        if self.metrics is not None:
            publish_metrics(self.producer, self.tracker, self.settings, TrainerMetrics(
                run_id=self.run_id, update=state.updates, policy=self.cfg.policy_name, policy_version=self.policy.version,
                ts=now(), metrics={k: float(v) for k, v in self.metrics.items() if v == v}))
            self.metrics = None
        drop_other_weights(self.ckpt.path.parent, state.weights_file)


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
    ckpt = CheckpointFile(checkpoint_path(settings, cfg.policy_name), LearnerState)
    policy, optimizer = start_policy(cfg, settings, store, ckpt)
    if group is not None:  # the other ranks start from the same weights and optimiser
        distributed.share_start(group, cfg, policy, optimizer)
    metrics = process_metrics("trainer")
    serve_metrics(settings, metrics)
    learner = PPOLearner(cfg, settings, store, ckpt, policy, optimizer, stop, group,
                         cfg.run_id or f"{cfg.policy_name}-{int(now())}", metrics=metrics)
    learner.committed()  # v0 of a fresh start, or a version the last run checkpointed but did not announce
    loop = ConsumeLoop.create(settings, cfg.group_id or f"trainer-{cfg.policy_name}", [topic_name(TOPICS.rl, settings)],
                              learner, STAGE, LoopConfig(poll_messages=cfg.min_batch, poll_timeout_s=cfg.poll_s,
                                                         flush_interval_s=cfg.max_wait_s, progress_interval_s=60.0),
                              commit=ckpt, **{"session.timeout.ms": int(cfg.session_timeout_s * 1000),
                                              "max.poll.interval.ms": int(cfg.max_update_s * 1000)})
    try:
        loop.run(stop)
    finally:
        flush_or_raise(learner.producer, learner.tracker)
    if group is not None:  # a clean stop; after a failure the followers fail on their own
        distributed.release(group)
    return {"version": policy.version, "updates": learner.state.updates, "trained": ckpt.checkpoint.trained.total,
            "idle_fraction": learner.idle_fraction(), "counts": dict(learner.counts)}
