"""Streaming SFT / CT training of a language policy: `flywheel sft` and `flywheel ct`.

Reads ScoredTrajectory records from flywheel.sft.v1 (SFT) or flywheel.ct.v1 (CT), trains once
``batch_trajectories`` are in hand (or ``max_wait_s`` passed), and publishes each update as a
new PolicyVersion.

The learner is a stage of the one checkpointed consume loop (``infra.runtime.consume_loop``): ``add``
decodes a record (an undecodable one goes to flywheel.dlq.v1), ``flush`` trains on what was
added and writes the weights file, the loop acknowledges the dead letters and writes the
checkpoint (``trainer.core.learner``: offsets by topic and partition, the typed state), and only then
``committed`` announces the version. Delivery guarantee (each trajectory trained on exactly
once across crashes): a crash before the checkpoint re-reads the batch, one after it re-reads
nothing; a resume seeks to the checkpoint's offsets and announces a version the crash left
unannounced.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable

import numpy as np
import torch

from trainer.core import metric_names as M
from trainer.sft.lm_config import LMTrainConfig  # noqa: F401 - re-exported: the config lives apart so the CLI need not import torch
from infra.runtime.checkpoint import Checkpoint
from infra.runtime.consume_loop import CheckpointFile, ConsumeLoop, DeadLetters, LoopConfig
from infra.runtime.kafka_clients import DeliveryTracker, flush_or_raise, make_producer
from infra.runtime.settings import Settings
from infra.runtime.topics import TOPICS, topic_name
from schemas.blobs import BlobStore
from schemas.codec import DecodeError, decode
from schemas.events import ScoredTrajectory
from schemas.events import PolicyVersion
from infra.runtime import versions
from trainer.core.learner import LearnerState, checkpoint_file, drop_other_weights, read_weights, write_weights
from trainer.core.publish import make_version, save_weights
from infra.runtime.policy import build_policy, load_policy_version, screen_or_none

log = logging.getLogger("flywheel.lm_stream")


SampleFn = Callable[[Any, ScoredTrajectory, Callable], list]


def token_mean_loss(policy, samples: list) -> tuple[torch.Tensor, int]:
    """-(sum of target-token log-probs) and the number of target tokens (for a token mean)."""
    batch = policy.make_batch(samples)
    logprobs, _, _ = policy.evaluate_tokens(batch)
    return -(logprobs * batch.target).sum(), int(batch.target.sum())


def train_step(policy, optimizer, samples: list, cfg: LMTrainConfig, loss_name: str = M.SFT_LOSS) -> dict[str, float]:
    """One optimiser step over ``samples`` (accumulated in minibatches), token-mean NLL; the loss is
    reported as ``loss_name`` (SFT's or CT's, trainer.core.metric_names.LM_LOSS: the same NLL)."""
    policy.train()
    optimizer.zero_grad(set_to_none=True)
    n_tokens = sum(sum(s.target) for s in samples)
    total = 0.0
    t0 = time.perf_counter()
    for i in range(0, len(samples), cfg.minibatch_samples):
        loss_sum, _ = token_mean_loss(policy, samples[i:i + cfg.minibatch_samples])
        (loss_sum / max(n_tokens, 1)).backward()
        total += float(loss_sum.detach())
    grad_norm = float(torch.nn.utils.clip_grad_norm_(policy.parameters(), cfg.max_grad_norm))
    optimizer.step()
    policy.eval()
    return {loss_name: total / max(n_tokens, 1), M.TOKENS: float(n_tokens), M.SAMPLES: float(len(samples)),
            M.GRAD_NORM: grad_norm, M.UPDATE_TIME_S: time.perf_counter() - t0}


# ---------------------------------------------------------------- the learner (a consume-loop stage)


class LMLearner:
    """add: decode; flush: one update on what was added + its weights file; committed: announce."""

    def __init__(self, trainer: "LMStreamTrainer", policy, optimizer, ckpt: CheckpointFile, stop: threading.Event) -> None:
        self.trainer, self.policy, self.optimizer, self.ckpt, self.stop = trainer, policy, optimizer, ckpt, stop
        self.cfg, self.settings = trainer.cfg, trainer.settings
        self.producer, self.tracker = make_producer(self.settings), DeliveryTracker()
        self.pending: list[ScoredTrajectory] = []

    @property
    def state(self) -> LearnerState:
        return self.ckpt.checkpoint.state

    def add(self, record: Any, dlq: DeadLetters) -> None:
        try:
            self.pending.append(decode(record.value(), ScoredTrajectory))
        except DecodeError as exc:
            dlq.send_record(exc, record)

    def ready(self) -> bool:
        return len(self.pending) >= self.cfg.batch_trajectories

    def flush(self, dlq: DeadLetters) -> None:
        batch, self.pending = self.pending, []
        if not batch:
            return
        samples = [s for scored in batch for s in self.trainer.sample_fn(self.policy, scored, self.trainer.load_image)]
        if not samples:  # nothing trainable (e.g. screenshots gone): the offsets move on, nothing is published
            log.warning("%s batch of %d trajectories had no trainable steps", self.trainer.mode, len(batch))
            return
        metrics = {M.TRAJECTORIES: float(len(batch))}
        metrics.update(train_step(self.policy, self.optimizer, samples, self.cfg, loss_name=M.LM_LOSS[self.trainer.mode]))
        self.trainer.update_times.append(metrics[M.UPDATE_TIME_S])
        parent = self.policy.version
        self.policy.version = versions.next_version(self.settings, self.cfg.policy_name, parent)
        pv = make_version(self.policy, save_weights(self.policy, self.trainer.store), parent, metrics)
        updates = self.state.updates + 1
        name = write_weights(self.trainer.folder, updates, self.policy, self.optimizer)
        self.ckpt.checkpoint.state = self.state.model_copy(update={
            "version": self.policy.version, "weights_file": name, "updates": updates,
            "announce": pv.model_dump(mode="json")})
        self.trainer.updates += 1
        log.info("%s update %d -> %s v%d %s", self.trainer.mode, self.trainer.updates, self.policy.name,
                 self.policy.version, metrics)
        if self.cfg.max_updates and self.trainer.updates >= self.cfg.max_updates:
            self.stop.set()

    def committed(self) -> None:
        """After the checkpoint: announce its version, then forget the older weights files."""
        if self.state.announce is not None:
            versions.publish(self.producer, self.tracker, self.settings, PolicyVersion.model_validate(self.state.announce))
            self.ckpt.checkpoint.state = self.state.model_copy(update={"announce": None})
            self.ckpt.save()
        drop_other_weights(self.trainer.folder, self.state.weights_file)


# ---------------------------------------------------------------- the trainer


class LMStreamTrainer:
    def __init__(self, settings: Settings, cfg: LMTrainConfig, mode: str, sample_fn: SampleFn) -> None:
        self.settings, self.cfg, self.mode, self.sample_fn = settings, cfg.validate(), mode, sample_fn
        self.topic = topic_name(TOPICS.sft if mode == "sft" else TOPICS.ct, settings)
        self.store = BlobStore(settings.blob_root)
        self.ckpt_path = checkpoint_file(settings, f"{cfg.policy_name}-{mode}")
        self.folder = self.ckpt_path.parent
        self.updates = 0
        self.update_times: list[float] = []

    def load_image(self, ref) -> np.ndarray | None:
        return screen_or_none(self.store, ref)

    def _initial_policy(self, ckpt: Checkpoint):
        """Checkpoint > latest published version > a fresh model from ``policy_config``;
        -> (policy, optimiser state or None)."""

        state: LearnerState | None = ckpt.state
        if state is not None:
            saved = read_weights(self.folder, state)
            policy = build_policy(self.cfg.policy_kind, self.cfg.policy_name, state.config)
            policy.load_state_dict(saved["weights"], strict=True)
            policy.version = state.version
            log.info("resuming %s v%d from %s", self.cfg.policy_name, policy.version, self.ckpt_path)
            return policy, saved["optimizer"]
        published = [pv for pv in versions.scan(self.settings, self.cfg.policy_name) if pv.kind == self.cfg.policy_kind]
        if published:
            pv = max(published, key=lambda p: p.version)
            log.info("starting from published %s v%d", pv.policy, pv.version)
            return load_policy_version(pv, self.store), None
        return build_policy(self.cfg.policy_kind, self.cfg.policy_name, self.cfg.initial_config()), None

    def run(self, stop: threading.Event | None = None) -> int:
        stop = stop or threading.Event()
        ckpt = CheckpointFile(self.ckpt_path, LearnerState)
        policy, optimizer_state = self._initial_policy(ckpt.checkpoint)
        policy.to(self.cfg.device)
        optimizer = torch.optim.AdamW(policy.parameters(), lr=self.cfg.lr, weight_decay=self.cfg.weight_decay)
        if optimizer_state is not None:
            optimizer.load_state_dict(optimizer_state)
        if ckpt.checkpoint.state is None:
            ckpt.checkpoint.state = LearnerState(version=policy.version, config=policy.config_dict(),
                                                 weights_file=write_weights(self.folder, 0, policy, optimizer))
        learner = LMLearner(self, policy, optimizer, ckpt, stop)
        learner.committed()  # a version the last run checkpointed but did not announce
        loop = ConsumeLoop.create(self.settings, self.cfg.group_id or f"{self.mode}-{self.cfg.policy_name}", [self.topic],
                                  learner, f"{self.mode}-trainer", LoopConfig(
                                      poll_messages=self.cfg.batch_trajectories, poll_timeout_s=self.cfg.poll_s,
                                      flush_interval_s=self.cfg.max_wait_s, exit_when_idle_s=self.cfg.idle_exit_s),
                                  commit=ckpt, **{"max.poll.interval.ms": int(self.cfg.max_update_s * 1000)})
        try:
            loop.run(stop)
        finally:
            flush_or_raise(learner.producer, learner.tracker)
        return self.updates
