"""Streaming SFT / CT training of a language policy: `flywheel sft` and `flywheel ct`.

Reads ScoredTrajectory records from flywheel.sft.v1 (SFT) or flywheel.ct.v1 (CT), trains once
``batch_trajectories`` are in hand (or ``max_wait_s`` passed), publishes each update as a new
PolicyVersion, and checkpoints.

Delivery guarantee (each trajectory trained on exactly once across crashes): the checkpoint
holds the weights, the optimiser state, the version and the next offset of every partition,
written atomically *before* the version is published; Kafka offsets are committed after that
(for lag monitoring only). A resume seeks to the checkpoint's offsets, and republishes its
version if the crash came between checkpoint and publish. A record that cannot be decoded goes
to flywheel.dlq.v1 and its offset moves on with the batch.
"""

from __future__ import annotations

import io
import json
import logging
import os
import shutil
import threading
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from confluent_kafka import TopicPartition
from PIL import Image

from trainer import metric_names as M
from trainer.lm_config import LMTrainConfig  # noqa: F401 - re-exported: the config lives apart so the CLI need not import torch
from infra.dlq import dead_letter, send_dead_letter
from infra.kafka import DeliveryTracker, flush_or_raise, make_consumer, make_producer
from infra.settings import Settings
from infra.topics import TOPICS, topic_name
from schemas.blobs import BlobStore
from schemas.codec import DecodeError, decode
from schemas.events import ScoredTrajectory
from trainer.publish_lm import publish_version

log = logging.getLogger("flywheel.lm_stream")


SampleFn = Callable[[Any, ScoredTrajectory, Callable], list]


def token_mean_loss(policy, samples: list) -> tuple[torch.Tensor, int]:
    """-(sum of target-token log-probs) and the number of target tokens (for a token mean)."""
    batch = policy.make_batch(samples)
    logprobs, _, _ = policy.evaluate_tokens(batch)
    return -(logprobs * batch.target).sum(), int(batch.target.sum())


def train_step(policy, optimizer, samples: list, cfg: LMTrainConfig, loss_name: str = M.SFT_LOSS) -> dict[str, float]:
    """One optimiser step over ``samples`` (accumulated in minibatches), token-mean NLL; the loss is
    reported as ``loss_name`` (SFT's or CT's, trainer.metric_names.LM_LOSS: the same NLL)."""
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


# ---------------------------------------------------------------- checkpoints


def save_checkpoint(folder: Path, policy, optimizer, offsets: dict[int, int], published: bool) -> None:
    """Atomic: written to a temporary folder, then renamed over the old one."""
    from safetensors.torch import save_file

    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    save_file({k: v.detach().contiguous().cpu() for k, v in policy.state_dict().items()}, str(tmp / "weights.safetensors"))
    torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
    state = {"version": policy.version, "offsets": {str(p): o for p, o in offsets.items()}, "published": published,
             "config": policy.config_dict(), "saved_at": time.time()}
    (tmp / "state.json").write_text(json.dumps(state, indent=1))
    old = folder.with_name(folder.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if folder.exists():
        os.replace(folder, old)
    os.replace(tmp, folder)
    shutil.rmtree(old, ignore_errors=True)


def mark_published(folder: Path) -> None:
    state = json.loads((folder / "state.json").read_text())
    state["published"] = True
    tmp = folder / "state.json.tmp"
    tmp.write_text(json.dumps(state, indent=1))
    os.replace(tmp, folder / "state.json")


def load_checkpoint(folder: Path) -> dict[str, Any] | None:
    if not (folder / "state.json").exists():
        return None
    from safetensors.torch import load_file

    state = json.loads((folder / "state.json").read_text())
    state["weights"] = load_file(str(folder / "weights.safetensors"))
    state["optimizer"] = torch.load(folder / "optimizer.pt", weights_only=False)
    state["offsets"] = {int(p): int(o) for p, o in state["offsets"].items()}
    return state


# ---------------------------------------------------------------- the loop


class LMStreamTrainer:
    def __init__(self, settings: Settings, cfg: LMTrainConfig, mode: str, sample_fn: SampleFn) -> None:
        self.settings, self.cfg, self.mode, self.sample_fn = settings, cfg.validate(), mode, sample_fn
        self.topic = topic_name(TOPICS.sft if mode == "sft" else TOPICS.ct, settings)
        self.store = BlobStore(settings.blob_root)
        self.ckpt_dir = settings.data_path / "checkpoints" / f"{cfg.policy_name}-{mode}"
        self.updates = 0
        self.update_times: list[float] = []

    def _load_image(self, ref) -> np.ndarray | None:
        try:
            return np.asarray(Image.open(io.BytesIO(self.store.get(ref))).convert("RGB"))
        except Exception as exc:
            log.warning("screenshot %s unavailable: %s", ref.sha256[:12], exc)
            return None

    def _initial_policy(self):
        """Checkpoint > latest published version > a fresh model from ``policy_config``."""
        from infra.policy import build_policy, load_policy_version
        from infra import versions

        ckpt = load_checkpoint(self.ckpt_dir)
        if ckpt is not None:
            policy = build_policy("lm", self.cfg.policy_name, ckpt["config"])
            policy.load_state_dict(ckpt["weights"], strict=True)
            policy.version = ckpt["version"]
            log.info("resuming %s v%d from %s", self.cfg.policy_name, policy.version, self.ckpt_dir)
            return policy, ckpt
        published = [pv for pv in versions.scan(self.settings, self.cfg.policy_name) if pv.kind == "lm"]
        if published:
            pv = max(published, key=lambda p: p.version)
            log.info("starting from published %s v%d", pv.policy, pv.version)
            return load_policy_version(pv, self.store), None
        config = self.cfg.initial_config()
        return build_policy("lm", self.cfg.policy_name, config), None

    def run(self, stop: threading.Event | None = None) -> int:
        stop = stop or threading.Event()
        policy, ckpt = self._initial_policy()
        policy.to(self.cfg.device)
        optimizer = torch.optim.AdamW(policy.parameters(), lr=self.cfg.lr, weight_decay=self.cfg.weight_decay)
        offsets: dict[int, int] = {}
        producer, tracker = make_producer(self.settings), DeliveryTracker()
        if ckpt is not None:
            optimizer.load_state_dict(ckpt["optimizer"])
            offsets = dict(ckpt["offsets"])
            if not ckpt["published"]:  # crashed between checkpoint and publish
                publish_version(self.settings, producer, tracker, self.store, policy, policy.version - 1, {})
                mark_published(self.ckpt_dir)
        consumer = make_consumer(self.settings, self.cfg.group_id or f"{self.mode}-{self.cfg.policy_name}")

        def on_assign(c, partitions):  # the checkpoint, not the group's commits, says where to start
            for tp in partitions:
                if tp.partition in offsets:
                    tp.offset = offsets[tp.partition]
            c.assign(partitions)

        consumer.subscribe([self.topic], on_assign=on_assign)
        pending: list[tuple[Any, ScoredTrajectory]] = []
        first_at = last_record = time.monotonic()
        try:
            while not stop.is_set():
                msg = consumer.poll(self.cfg.poll_s)
                now = time.monotonic()
                if msg is not None and not msg.error():
                    last_record = now
                    if not pending:
                        first_at = now
                    offsets[msg.partition()] = msg.offset() + 1
                    try:
                        pending.append((msg, decode(msg.value(), ScoredTrajectory)))
                    except DecodeError as exc:
                        send_dead_letter(producer, self.settings, dead_letter(
                            f"{self.mode}-trainer", exc, msg.topic(), msg.partition(), msg.offset(), msg.key(),
                            msg.value()), msg.key(), on_delivery=tracker)
                ready = len(pending) >= self.cfg.batch_trajectories or (pending and now - first_at >= self.cfg.max_wait_s)
                if ready:
                    self._update(policy, optimizer, [s for _, s in pending], offsets, producer, tracker)
                    consumer.commit(offsets=[TopicPartition(self.topic, p, o) for p, o in offsets.items()],
                                    asynchronous=False)
                    pending.clear()
                    if self.cfg.max_updates and self.updates >= self.cfg.max_updates:
                        break
                if self.cfg.idle_exit_s and not pending and now - last_record > self.cfg.idle_exit_s:
                    log.info("no records for %.0fs: stopping", self.cfg.idle_exit_s)
                    break
        finally:
            consumer.close()
            flush_or_raise(producer, tracker)
        return self.updates

    def _update(self, policy, optimizer, batch: list[ScoredTrajectory], offsets, producer, tracker) -> None:
        flush_or_raise(producer, tracker)  # the batch's dead letters are acknowledged before its checkpoint
        samples = [s for scored in batch for s in self.sample_fn(policy, scored, self._load_image)]
        metrics = {M.TRAJECTORIES: float(len(batch))}
        if not samples:  # nothing trainable (e.g. screenshots gone): move the offsets on, publish nothing
            save_checkpoint(self.ckpt_dir, policy, optimizer, offsets, published=True)
            log.warning("%s batch of %d trajectories had no trainable steps", self.mode, len(batch))
            return
        metrics.update(train_step(policy, optimizer, samples, self.cfg, loss_name=M.LM_LOSS[self.mode]))
        self.update_times.append(metrics[M.UPDATE_TIME_S])
        from infra import versions

        parent = policy.version
        policy.version = versions.next_version(self.settings, self.cfg.policy_name, parent)
        save_checkpoint(self.ckpt_dir, policy, optimizer, offsets, published=False)
        publish_version(self.settings, producer, tracker, self.store, policy, parent, metrics)
        mark_published(self.ckpt_dir)
        self.updates += 1
        log.info("%s update %d -> %s v%d %s", self.mode, self.updates, policy.name, policy.version, metrics)
