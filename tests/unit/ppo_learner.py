"""A PPO learner on the tiny pixel policy of ``tests.unit.ppo_samples``, built without Kafka
(nothing is sent, nothing is published, the sft topic's snapshot is given), and batches of its
four click-test samples named as episodes: for the tests of the learner's state and of
self-imitation."""

from __future__ import annotations

import json
import threading

from infra.runtime import versions
from infra.runtime.settings import load_settings
from schemas.blobs import BlobStore
from tests.unit.ppo_samples import tiny_policy_and_samples
from trainer.rl import streaming_ppo as stream
from trainer.rl.config import TrainConfig
from trainer.sft import bc

POLICY_CONFIG = {"grid": 4, "channels": [4, 8, 8]}  # tiny_policy_and_samples' policy


def tiny_learner(tmp_path, monkeypatch, ckpt, sft=(), **cfg) -> stream.PPOLearner:
    """A learner checkpointing to ``ckpt`` with the TrainConfig fields ``cfg``; ``sft``: what it
    reads from the sft topic."""
    monkeypatch.setattr(stream, "make_producer", lambda settings: None)  # nothing is sent here
    monkeypatch.setattr(bc, "read_sft", lambda settings, stage, timeout_s: list(sft))  # the sft topic's snapshot
    monkeypatch.setattr(versions, "latest", lambda settings, name, timeout_s=15.0: None)  # nothing published
    settings = load_settings({"data_dir": str(tmp_path)})
    config = TrainConfig(policy_name="p", policy_config=json.dumps(POLICY_CONFIG), min_batch=4, epochs=1,
                         minibatch_size=4, **cfg).validate()
    store = BlobStore(settings.blob_root)
    policy, optimizer = stream.start_policy(config, settings, store, ckpt)
    return stream.PPOLearner(config, settings, store, ckpt, policy, optimizer, threading.Event(), None, "run")


def click_batch(name: str, experts: list | None = None) -> list:
    """The four samples as episodes ``<name>-<k>`` of click-test, the even ones successes;
    ``experts``: each step's expert labels, where given."""
    _, samples = tiny_policy_and_samples([1.0, 0.0, 1.0, 0.0])
    for k, s in enumerate(samples):
        s.episode_id, s.task, s.success = f"{name}-{k}", "click-test", k % 2 == 0
        if experts is not None:
            s.experts = list(experts)
    return samples
