"""`flywheel train --policy-kind lm` on the real broker: the language policy's trajectories are
rebuilt in the context they were sampled in (v0 re-scores them to their behaviour log-probs), and
one PPO update moves each step's log-prob in the direction of its advantage (relative to the
shift common to all steps: see the test).

A tiny from-config model (hidden 64, byte tokenizer) keeps this under a minute on two cores; the
pretrained SmolLM2 runs the same code (tests/unit/test_lm_pretrained.py checks its act/evaluate)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch

from infra.runtime.kafka_clients import DeliveryTracker, flush_or_raise, make_producer
from infra.runtime.policy import build_policy, load_policy_version
from infra.runtime.topics import TOPICS, topic_name
from infra.runtime.versions import scan as read_versions
from schemas.blobs import BlobStore
from schemas.codec import encode
from tests.unit.lm_samples import CONFIG, POLICY, rollout, step_logprobs

ROOT = Path(__file__).resolve().parents[2]


def test_lm_ppo_update_moves_logprobs_toward_advantages(settings, group_id):
    store = BlobStore(settings.blob_root)
    torch.manual_seed(0)
    behaviour = build_policy("lm", POLICY, CONFIG)
    scored = rollout(behaviour, store, 8)
    producer, tracker = make_producer(settings), DeliveryTracker()
    for s in scored:
        producer.produce(topic_name(TOPICS.rl, settings), key=s.episode_id.encode(), value=encode(s), on_delivery=tracker)
    flush_or_raise(producer, tracker)

    env = {**os.environ, "PYTHONPATH": str(ROOT), "FLYWHEEL_DATA_DIR": settings.data_dir,
           "FLYWHEEL_KAFKA_BOOTSTRAP": settings.bootstrap, "FLYWHEEL_TOPIC_PREFIX": settings.topic_prefix}
    cmd = [sys.executable, "-m", "app.cli", "train", "--policy-kind", "lm", "--pretrained", "",
           "--policy-name", POLICY, "--policy-config", json.dumps(CONFIG), "--min-batch", "8", "--max-wait-s", "60",
           "--max-updates", "1", "--group-id", group_id, "--lr", "1e-4", "--epochs", "2", "--minibatch-size", "4",
           "--torch-threads", "1"]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "trained 1 updates -> version 1, 8 trajectories" in done.stdout

    versions = {v.version: v for v in read_versions(settings, POLICY)}
    assert sorted(versions) == [0, 1] and versions[1].kind == "lm"
    v0, v1 = (load_policy_version(versions[v], store) for v in (0, 1))
    before, after = step_logprobs(v0, scored, store), step_logprobs(v1, scored, store)
    # the trainer's v0 is the behaviour policy and rebuilds each step's context exactly
    np.testing.assert_allclose(before, [[st.logprob for st in s.trajectory.steps] for s in scored], atol=2e-3)
    moved = after - before
    # Every answer shares its template ("Thought: the button at ..\nAction: click(start_box=..)"),
    # so the update also moves all of them together: with the defaults seen both down (the value
    # loss and entropy bonus move the shared trunk) and, with those two off, both up (clip-higher
    # leaves positive advantages more room). The advantages are whitened (mean 0), so the
    # direction PPO owes them is relative to that common shift.
    relative = moved - moved.mean()
    sign = np.array([1.0 if s.reward > 0 else -1.0 for s in scored])[:, None]
    rewarded, punished = moved[sign[:, 0] > 0].mean(), moved[sign[:, 0] < 0].mean()
    print(f"PPO log-prob movement: rewarded steps {rewarded:+.3f}, punished steps {punished:+.3f} (nats per step), "
          f"{(np.sign(relative) == sign).mean():.0%} of steps on their advantage's side of the common shift")
    assert (np.sign(relative) == sign).mean() >= 0.75, moved
    assert rewarded - punished > 0.2, (rewarded, punished)
