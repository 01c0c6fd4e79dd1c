"""The streaming trainer on the real broker: trajectories in, hash-verified versions out, and
exactly-once training across a SIGKILL (proved by counting the episode ids in the checkpoint)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from infra.runtime.kafka_clients import DeliveryTracker, flush_or_raise, make_producer
from infra.runtime.topics import TOPICS, topic_name
from schemas.actions import Click
from schemas.blobs import BlobStore
from schemas.codec import encode
from trainer.rl.config import TrainConfig
from infra.runtime.policy import build_policy, load_policy_version
from infra.runtime.policy import PolicyInput
from infra.runtime.versions import scan as read_versions
from infra.runtime.checkpoint import TrainedIds
from trainer.rl import rounds
from trainer.rl.streaming_ppo import checkpoint_path, load_checkpoint, train
from tests.fakes.clicks import make_episode, scored_trajectory

ROOT = Path(__file__).resolve().parents[2]
POLICY = "pixel-test"
POLICY_CONFIG = '{"grid": 8, "channels": [8, 16, 16]}'


def produce_trajectories(settings, n: int, version: int = 0, seed: int = 0, scorer: str | None = None) -> list[str]:
    store = BlobStore(settings.blob_root)
    policy = build_policy("pixel", POLICY, {"grid": 8, "channels": [8, 16, 16]})
    rng = np.random.default_rng(seed)
    eps = [make_episode("click-test", rng) for _ in range(n)]
    decisions = policy.act([PolicyInput(e.image, e.instruction, 160, 210) for e in eps])
    producer, tracker = make_producer(settings), DeliveryTracker()
    ids = []
    for k, (e, d) in enumerate(zip(eps, decisions)):
        ep_id = f"ep-{seed}-{k}"
        st = scored_trajectory(e, d.action, d.logprob, ep_id, POLICY, version, store)
        if scorer is not None:
            st = st.model_copy(update={"scorer": scorer})
        producer.produce(topic_name(TOPICS.rl, settings), key=ep_id.encode(), value=encode(st), on_delivery=tracker)
        ids.append(ep_id)
    flush_or_raise(producer, tracker)
    return ids


def test_stream_publishes_loadable_versions(settings, group_id):
    settings = replace(settings, max_staleness=100)  # every trajectory trainable (the bound is a platform setting)
    produce_trajectories(settings, 12)
    cfg = TrainConfig(policy_name=POLICY, policy_config=POLICY_CONFIG, min_batch=4, max_wait_s=60.0,
                      max_updates=3, group_id=group_id, epochs=2, minibatch_size=4)
    result: dict = {}
    worker = threading.Thread(target=lambda: result.update(train(cfg, settings)), daemon=True)
    worker.start()
    worker.join(timeout=180)
    assert not worker.is_alive(), "trainer did not finish 3 updates in 180 s"
    assert result["updates"] == 3 and result["trained"] == 12
    versions = read_versions(settings, POLICY)
    assert [v.version for v in versions] == [0, 1, 2, 3]
    assert [v.parent for v in versions] == [None, 0, 1, 2]
    store = BlobStore(settings.blob_root)
    loaded = [load_policy_version(v, store) for v in versions]  # each verified against its sha256
    assert len({v.sha256 for v in versions}) == 4
    assert not torch.equal(loaded[0].loc_head.weight, loaded[3].loc_head.weight)  # it learned something
    assert "losses/clip_frac" in versions[1].metrics and "perf/idle_fraction" in versions[1].metrics


def test_kl_penalty_is_measured_against_the_version_the_trainer_started_from(settings, group_id):
    """One minibatch per update (epochs=1, minibatch = batch): each update's ``kl_ref`` is measured
    at the weights it started from, so it is 0 on v0's own update and positive on every later one;
    a restart that re-anchored on the version it resumed at would measure 0 again."""
    settings = replace(settings, max_staleness=100)
    produce_trajectories(settings, 12)
    cfg = TrainConfig(policy_name=POLICY, policy_config=POLICY_CONFIG, min_batch=4, max_wait_s=60.0,
                      max_updates=2, group_id=group_id, epochs=1, minibatch_size=4, kl_coef=0.5)
    assert train(cfg, settings)["updates"] == 2
    # the anchor is v0 (where it started), read back from the policy topic and remembered by the checkpoint
    assert load_checkpoint(checkpoint_path(settings, POLICY))["kl_ref_version"] == 0
    assert train(replace(cfg, max_updates=3), settings)["updates"] == 3  # a restart at v2 keeps the anchor
    assert load_checkpoint(checkpoint_path(settings, POLICY))["kl_ref_version"] == 0
    versions = read_versions(settings, POLICY)
    assert [v.version for v in versions] == [0, 1, 2, 3]
    kl = [v.metrics["losses/kl_ref"] for v in versions[1:]]
    assert "losses/approx_kl" in versions[1].metrics
    # v0 against itself is exactly 0 (the same weights give the same log-probs); v1, then (after
    # the restart) v2 against v0 are not, however small one step of a small learning rate makes them
    assert kl[0] == 0.0 and kl[1] > 0.0 and kl[2] > 0.0, kl


def test_rft_rounds_fine_tune_on_the_sft_topics_successes_every_nth_update(settings, group_id, monkeypatch):
    """rft_every=2: the second PPO update's version is also fine-tuned on the policy's own and its
    annotator's successes on flywheel.sft.v1 (another policy's are left out; junk is dead-lettered),
    so those steps are likelier under it; a round that fails is counted and PPO goes on."""
    from infra.runtime.kafka_clients import read_to_end
    from trainer.sft import rft
    from trainer.sft.bc import examples

    settings = replace(settings, max_staleness=100)
    produce_trajectories(settings, 16)  # four updates of 4
    store, rng = BlobStore(settings.blob_root), np.random.default_rng(3)
    producer, tracker, sft = make_producer(settings), DeliveryTracker(), []
    for k, policy in enumerate([POLICY] * 5 + [rft.annotator_of(POLICY)] * 2 + ["someone-else"] * 3):
        e = make_episode("click-test", rng)
        x0, y0, x1, y1 = e.target
        st = scored_trajectory(e, Click(x=(x0 + x1) / 320, y=(y0 + y1) / 420), 0.0, f"s-{k}", policy, 0, store)
        producer.produce(topic_name(TOPICS.sft, settings), key=st.episode_id.encode(), value=encode(st), on_delivery=tracker)
        sft.append(st)
    producer.produce(topic_name(TOPICS.sft, settings), key=b"junk", value=b"{not json", on_delivery=tracker)
    flush_or_raise(producer, tracker)
    cfg = TrainConfig(policy_name=POLICY, policy_config=POLICY_CONFIG, min_batch=4, max_wait_s=60.0, max_updates=2,
                      group_id=group_id, epochs=1, minibatch_size=4, rft_every=2, rft_per_task=4, rft_epochs=40,
                      rft_lr=1e-2)
    assert train(cfg, settings)["updates"] == 2
    v1, v2 = read_versions(settings, POLICY)[1:]
    assert "losses/rft_loss" not in v1.metrics
    assert v2.metrics["batch/rft_trajectories"] == 6 and v2.metrics["batch/rft_own"] == 4  # 4 newest own + 2 demos
    assert v2.metrics["batch/rft_steps"] == 6 and v2.metrics["batch/rft_skipped"] == 0
    assert load_checkpoint(checkpoint_path(settings, POLICY))["ppo_updates"] == 2
    letters = [m.value() for m in read_to_end(settings, topic_name(TOPICS.dlq, settings))]
    assert len(letters) == 1 and b"rft" in letters[0]
    before, after = (load_policy_version(v, store) for v in (v1, v2))  # the round is in the published weights
    data = examples(before, sft[:7], store)
    with torch.no_grad():
        gain = (after.evaluate(data.obs, data.instructions, data.actions)[0]
                - before.evaluate(data.obs, data.instructions, data.actions)[0]).mean()
    assert gain > 1.0, gain  # one PPO update alone moves these by a fraction of a nat

    def fail(*_, **__):
        raise TimeoutError("flywheel.sft.v1 not read to its end in time")

    monkeypatch.setattr(rounds, "rft_round", fail)  # where the trainer looks it up
    assert train(replace(cfg, max_updates=4), settings)["updates"] == 4
    v4 = read_versions(settings, POLICY)[-1]
    assert v4.version == 4 and v4.metrics["stream/rft_failed_total"] == 1 and "losses/rft_loss" not in v4.metrics


def _run_trainer(settings, group_id: str, max_updates: int, log: Path) -> subprocess.Popen:
    """One `flywheel train` process, its output appended to ``log`` (a pipe nobody reads could fill
    and block it). --session-timeout-s 6: a restart waits that long, not 45 s, for the group to
    drop the member that was killed; --max-wait-s 300: every update takes a full batch of 4, so 8
    updates are exactly the 32 trajectories, however slow the machine."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "FLYWHEEL_DATA_DIR": settings.data_dir,
           "FLYWHEEL_KAFKA_BOOTSTRAP": settings.bootstrap, "FLYWHEEL_TOPIC_PREFIX": settings.topic_prefix}
    cmd = [sys.executable, "-m", "app.cli", "train", "--policy-name", POLICY, "--policy-config", POLICY_CONFIG,
           "--min-batch", "4", "--max-wait-s", "300", "--max-updates", str(max_updates), "--group-id", group_id,
           "--session-timeout-s", "6", "--epochs", "1", "--minibatch-size", "4", "--torch-threads", "1",
           "--max-staleness", "100"]
    with open(log, "a") as out:
        return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, text=True)


def test_sigkill_and_resume_train_each_trajectory_exactly_once(settings, group_id, tmp_path):
    ids = produce_trajectories(settings, 32)
    ckpt = checkpoint_path(settings, POLICY)
    log = tmp_path / "trainer.log"
    procs: list[subprocess.Popen] = []

    def run() -> subprocess.Popen:
        procs.append(_run_trainer(settings, group_id, 8, log))
        return procs[-1]

    def output() -> str:
        return log.read_text()[-4000:]

    try:
        # 1. killed the moment the 2nd checkpoint lands: typically before its version is announced or
        # its offsets committed (watched from outside: no fault hook inside the trainer)
        proc = run()
        mtime = None
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and proc.poll() is None:
            if ckpt.exists() and ckpt.stat().st_mtime_ns != mtime:
                mtime = ckpt.stat().st_mtime_ns
                state = load_checkpoint(ckpt)
                if state["updates"] >= 2:
                    proc.send_signal(signal.SIGKILL)
                    break
            time.sleep(0.005)
        if proc.poll() is None:  # its 180 s ran out: stop it, and the next assert says why
            proc.kill()
        proc.wait(timeout=30)
        assert proc.returncode == -signal.SIGKILL, f"exited by itself:\n{output()}"
        assert ckpt.exists() and load_checkpoint(ckpt)["updates"] >= 2, f"no 2nd update in 180 s:\n{output()}"

        # 2. killed from outside at an arbitrary moment after the 4th update
        proc = run()
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and proc.poll() is None and (
                not ckpt.exists() or load_checkpoint(ckpt)["updates"] < 4):
            time.sleep(0.2)
        assert proc.poll() is None, f"the resumed trainer exited by itself:\n{output()}"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        assert load_checkpoint(ckpt)["updates"] >= 4, f"no 4th update in 180 s:\n{output()}"

        # 3. resume to the end
        proc = run()
        try:
            code = proc.wait(timeout=240)
        except subprocess.TimeoutExpired:
            proc.kill()
            pytest.fail(f"not done in 240 s:\n{output()}")
        assert code == 0, output()
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=30)

    state = load_checkpoint(ckpt)
    assert state["updates"] == 8
    trained = TrainedIds.model_validate(state["trained"])
    assert sorted(trained.recent) == sorted(ids), "a trajectory was lost or trained on twice"
    assert trained.total == 32
    versions = read_versions(settings, POLICY)
    assert max(v.version for v in versions) == 8  # version 2 re-announced on resume, none skipped
    assert {v.version for v in versions} == set(range(9))
    load_policy_version(max(versions, key=lambda v: v.version), BlobStore(settings.blob_root))


def test_replayed_and_rescored_copies_are_not_trained_again(settings, group_id):
    settings = replace(settings, max_staleness=100)  # every trajectory trainable (the bound is a platform setting)
    ids = produce_trajectories(settings, 8)
    produce_trajectories(settings, 8)  # the same episodes again (an upstream at-least-once replay)
    produce_trajectories(settings, 8, scorer="strict-v1")  # a re-scoring run routed to RL
    cfg = TrainConfig(policy_name=POLICY, policy_config=POLICY_CONFIG, min_batch=4, max_wait_s=2.0,
                      group_id=group_id, epochs=1, minibatch_size=4)
    stop, result = threading.Event(), {}
    worker = threading.Thread(target=lambda: result.update(train(cfg, settings, stop)), daemon=True)
    worker.start()
    ckpt, deadline = checkpoint_path(settings, POLICY), time.monotonic() + 180
    while time.monotonic() < deadline:  # until every one of the 24 records was handled and checkpointed
        counts = load_checkpoint(ckpt)["counts"] if ckpt.exists() else {}
        if counts.get("duplicates_skipped", 0) + counts.get("skipped_other_scorer", 0) >= 16:
            break
        time.sleep(0.5)
    stop.set()
    worker.join(timeout=60)
    assert not worker.is_alive(), "trainer did not stop"
    assert result["trained"] == 8, result
    assert result["counts"]["duplicates_skipped"] == 8
    assert result["counts"]["skipped_other_scorer"] == 8
    state = load_checkpoint(ckpt)
    assert sorted(TrainedIds.model_validate(state["trained"]).recent) == sorted(ids)


def test_a_dead_letter_that_cannot_be_delivered_is_never_checkpointed_past(settings, group_id):
    """The DLQ topic is gone (auto-create is off): the dead letter of a bad RL record fails, and
    the trainer stops without a checkpoint past that record, so a restart reads it again."""
    settings = replace(settings, max_staleness=100)  # every trajectory trainable (the bound is a platform setting)
    from confluent_kafka.admin import AdminClient

    from infra.runtime.admin import delete_topics
    from infra.runtime.kafka_clients import DeliveryError, client_config

    producer, tracker = make_producer(settings), DeliveryTracker()
    producer.produce(topic_name(TOPICS.rl, settings), key=b"bad", value=b"{not json", partition=0)
    flush_or_raise(producer, tracker)
    produce_trajectories(settings, 4)
    dlq = topic_name(TOPICS.dlq, settings)
    delete_topics(settings, [dlq])
    admin = AdminClient(client_config(settings))
    deadline = time.monotonic() + 30
    while dlq in admin.list_topics(timeout=10).topics and time.monotonic() < deadline:
        time.sleep(0.2)  # deletion is asynchronous on the broker
    cfg = TrainConfig(policy_name=POLICY, policy_config=POLICY_CONFIG, min_batch=8, max_wait_s=2.0,
                      group_id=group_id, epochs=1, minibatch_size=4)
    stop, raised = threading.Event(), []

    def run():
        try:
            train(cfg, settings, stop)
        except Exception as exc:  # noqa: BLE001 - what the trainer died of is the point
            raised.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(timeout=120)  # librdkafka gives up on the missing topic after ~30 s
    stop.set()
    worker.join(timeout=30)
    assert raised and isinstance(raised[0], DeliveryError), raised
    state = load_checkpoint(checkpoint_path(settings, POLICY))
    assert state["updates"] == 0 and state["offsets"].get(topic_name(TOPICS.rl, settings), {}) == {}
