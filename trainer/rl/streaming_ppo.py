"""The streaming PPO trainer: flywheel.rl.v1 in, policy versions and metrics out.

Scored trajectories are pooled until a batch is full (trainer.rl.intake: which records are PPO
data, the pool's bounds, and staleness: trajectories more than ``max_staleness`` versions old are
dropped on arrival and counted); the update cuts episodes longer than ``chunk_steps`` into chunks
(trainer.rl.chunks); one PPO update follows (critic-only while value pretraining lasts,
trainer.rl.value_pretraining; against the KL reference when ``kl_coef`` > 0,
trainer.rl.kl_reference; with self-imitation on steps replayed from the policy's best episodes
and the entropy coefficient kept in a band when on, trainer.rl.sil_replay), then the rounds due
after it (RFT, DAgger: trainer.rl.rounds), then a new version is published
(trainer.rl.publishing) that the rollout workers hot-reload while they keep running. What the
learner remembers across restarts is typed in trainer.rl.state.

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
an untrained trajectory. A copy of an episode that arrives again (an at-least-once replay
upstream, a rebalance) is skipped by the checkpoint's trained ids
(``infra.runtime.checkpoint.TrainedIds``, bounded by the staleness window). The rounds run inside
the update, so the guarantee covers them (trainer.rl.rounds says what a replay repeats).

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

import torch

from infra.runtime import versions
from infra.runtime.checkpoint import load_checkpoint as load_checkpoint_file
from infra.runtime.config import describe
from infra.runtime.consume_loop import CheckpointFile, ConsumeLoop, DeadLetters, LoopConfig
from infra.runtime.kafka_clients import flush_or_raise, make_producer
from infra.runtime.metrics import ProcessMetrics, process_metrics, serve_metrics
from infra.runtime.settings import Settings
from infra.runtime.topics import TOPICS, topic_name
from schemas.base import now
from schemas.blobs import BlobStore
from trainer.core import metric_names as M
from trainer.core.learner import checkpoint_file, drop_other_weights, write_weights
from trainer.rl import distributed
from trainer.rl.config import TrainConfig
from trainer.rl.intake import Intake
from trainer.rl.kl_reference import KLReference
from trainer.rl.learner_metrics import BusyClock, batch_metrics, record_update
from trainer.rl.publishing import Publisher
from trainer.rl.rounds import Rounds, remember_outcomes
from trainer.rl.self_imitation import SILSample
from trainer.rl.sil_replay import SelfImitation, own_successes
from trainer.rl.start import start_policy
from trainer.rl.state import PPOState
from trainer.rl.update import Batch, collate, ppo_update
from trainer.rl.value_pretraining import ValuePretraining

log = logging.getLogger("flywheel.trainer")
STAGE = "trainer"


# ---------------------------------------------------------------- checkpoint


def checkpoint_path(settings: Settings, policy_name: str) -> Path:
    return checkpoint_file(settings, policy_name)


def load_checkpoint(path: Path) -> dict[str, Any] | None:
    """What the checkpoint at ``path`` says, as a plain dict (for tools and tests): version,
    updates, counts, offsets, trained ({"recent", "total"}) and the PPO learner's own fields."""
    if not path.exists():
        return None
    ckpt = load_checkpoint_file(path, PPOState)
    state = ckpt.state.model_dump(exclude={"config", "weights_file", "announce"})
    return {**state, "offsets": ckpt.offsets, "trained": ckpt.trained.model_dump()}


# ---------------------------------------------------------------- the learner (a consume-loop stage)


class PPOLearner:
    """add: decode, filter, pool; ready: a batch is full; flush: one PPO (or critic-only) update
    and its weights file; committed: announce the version, publish the update's metrics."""

    def __init__(self, cfg: TrainConfig, settings: Settings, store: BlobStore, ckpt: CheckpointFile, policy,
                 optimizer, stop: threading.Event, group: distributed.Group | None, run_id: str,
                 metrics: ProcessMetrics | None = None) -> None:
        self.cfg, self.settings, self.ckpt = cfg, settings, ckpt
        self.policy, self.optimizer, self.stop, self.group = policy, optimizer, stop, group
        self.prom = metrics if metrics is not None else process_metrics("trainer")
        self.clock = BusyClock()
        self.intake = Intake(cfg, settings.max_staleness, store, policy, self._count)
        self.value_pretraining = ValuePretraining.from_config(cfg)
        self.kl_reference = KLReference(cfg, settings, store)
        self.rounds = Rounds(cfg, settings, store, policy, self._count)
        self.self_imitation = SelfImitation(cfg, lambda: own_successes(settings, store, policy, cfg))
        self.publisher = Publisher(settings, store, make_producer(settings), run_id, cfg.policy_name)
        self.metrics: dict[str, float] | None = None  # the last update's, published once committed
        if cfg.max_updates and self.state.updates >= cfg.max_updates:
            stop.set()

    @property
    def state(self) -> PPOState:
        return self.ckpt.checkpoint.state

    @property
    def counts(self) -> dict[str, int]:
        return self.state.counts

    def _count(self, fate: str) -> int:
        """One more record (or round) of this fate, in the checkpoint and on /metrics; -> the total."""
        self.counts[fate] = self.counts.get(fate, 0) + 1
        self.prom["flywheel_trainer_trajectories_total"].labels(fate=fate).inc()
        return self.counts[fate]

    def idle_fraction(self) -> float:
        return self.clock.idle_fraction()

    # ------------------------------------------------------------------ per record
    def add(self, record: Any, dlq: DeadLetters) -> None:
        with self.clock.busy():
            self.intake.add(record, dlq, self.ckpt.checkpoint.trained)

    def ready(self) -> bool:
        return self.intake.ready()

    def tick(self) -> None:
        """Once per poll: while rank 0 waits for data, the other ranks hear from it."""
        if self.group is not None:
            distributed.keep_alive(self.group)

    # ------------------------------------------------------------------ the update (flush)
    def flush(self, dlq: DeadLetters) -> None:
        with self.clock.busy():
            self._flush()
        self.prom["flywheel_trainer_idle_fraction"].set(self.idle_fraction())

    def _flush(self) -> None:
        cfg, policy, state, trained = self.cfg, self.policy, self.state, self.ckpt.checkpoint.trained
        # the stale total reads 0, not absent, once the learner flushed (in the checkpoint and on /metrics)
        self.counts.setdefault("stale_dropped", 0)
        self.prom["flywheel_trainer_trajectories_total"].labels(fate="stale_dropped")
        episodes, stale = self.intake.take()
        if not episodes:
            return
        critic_only = self.value_pretraining.critic_only(state, time.time())
        lags = self.intake.lags(episodes)
        started = time.monotonic()
        batch = collate(episodes, cfg.chunk_steps)
        batch.ref_logprob = self.kl_reference.logprobs(batch, state, policy)  # rank 0 scores it once; it travels
        sil = self.self_imitation.before_update(episodes, critic_only)
        metrics = self._update(batch, critic_only, sil)
        metrics.update(self.self_imitation.after_update(sil, state, metrics, critic_only))
        metrics.update(self.rounds.after_update(episodes, state, critic_only))
        parent = policy.version
        if critic_only:  # the acting policy is unchanged: no new version
            self.value_pretraining.record(state, metrics)
        else:
            policy.version = versions.next_version(self.settings, cfg.policy_name, policy.version)
        self.intake.mark_trained(episodes, trained)
        remember_outcomes(state, episodes)
        updates = state.updates + 1
        metrics.update(batch_metrics(episodes, lags, self.counts, trained.total, self.idle_fraction()))
        announce = self.publisher.stage(policy, parent, metrics) if policy.version != parent else state.announce
        self.ckpt.checkpoint.state = state.model_copy(update={
            "version": policy.version, "updates": updates, "announce": announce,
            "weights_file": write_weights(self.ckpt.path.parent, updates, policy, self.optimizer)})
        self.metrics = metrics
        record_update(self.prom, time.monotonic() - started, lags, policy.version)
        log.info("update %d -> v%d: %d trajectories (%d stale dropped) reward %.3f entropy %.3f idle %.2f",
                 updates, policy.version, len(episodes), stale, metrics.get(M.REWARD_MEAN, float("nan")),
                 metrics.get(M.ENTROPY, float("nan")), metrics[M.IDLE_FRACTION])
        if cfg.max_updates and updates >= cfg.max_updates:
            self.stop.set()

    def _update(self, batch: Batch, critic_only: bool, sil: SILSample | None) -> dict[str, float]:
        """One PPO (or critic-only) update of the policy on ``batch`` (with self-imitation on the
        replayed steps ``sil``), on this rank or shared by the group."""
        cfg = self.self_imitation.config(self.state)
        if self.group is None:
            return ppo_update(self.policy, self.optimizer, batch, cfg, critic_only=critic_only, sil=sil)
        return distributed.lead_update(self.group, self.policy, self.optimizer, batch, cfg, critic_only)

    # ------------------------------------------------------------------ after the checkpoint
    def committed(self) -> None:
        """The checkpoint is written: announce its version, publish the update's metrics."""
        self.publisher.announce(self.ckpt)
        state = self.state
        if self.metrics is not None:
            self.publisher.metrics(state.updates, self.policy.version, self.metrics)
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
    ckpt = CheckpointFile(checkpoint_path(settings, cfg.policy_name), PPOState)
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
        flush_or_raise(learner.publisher.producer, learner.publisher.tracker)
    if group is not None:  # a clean stop; after a failure the followers fail on their own
        distributed.release(group)
    return {"version": policy.version, "updates": learner.state.updates, "trained": ckpt.checkpoint.trained.total,
            "idle_fraction": learner.idle_fraction(), "counts": dict(learner.counts)}
