"""On the real broker: the server hot-reloads published versions and refuses a tampered one;
SFT streaming publishes loadable versions and resumes from its checkpointed offsets; merge of
two published versions equals the interpolated tensors."""

from __future__ import annotations

import asyncio
import time

import pytest
import torch
from aiohttp.test_utils import TestClient, TestServer
from serving_fixtures import scored_trajectory

from infra.runtime.kafka_clients import DeliveryTracker, flush_or_raise, make_producer
from infra.runtime.topics import TOPICS, topic_name
from schemas.blobs import BlobStore
from schemas.codec import encode
from schemas.events import PolicyVersion
from infra.runtime.policy import build_policy, load_policy_version
from trainer.core.publish import publish_version, weights_to_bytes as weights_blob
from infra.runtime.versions import scan as scan_policy_topic

CFG = {"max_new_tokens": 4}


def publish(settings, policy, version: int, parent=None) -> PolicyVersion:
    policy.version = version
    producer = make_producer(settings)
    return publish_version(settings, producer, DeliveryTracker(), BlobStore(settings.blob_root), policy, parent, {})


def publish_tampered(settings, policy, version: int) -> PolicyVersion:
    """Announce weights whose stored bytes were changed after hashing."""
    store = BlobStore(settings.blob_root)
    policy.version = version
    ref = store.put(weights_blob(policy))
    path = store._path(ref.sha256)
    data = bytearray(open(path, "rb").read())
    data[-1] ^= 0xFF
    open(path, "wb").write(bytes(data))
    pv = PolicyVersion(policy=policy.name, version=version, kind="lm", uri=ref.uri, sha256=ref.sha256, parent=version - 1,
                       created_at=time.time(), config=policy.config_dict())
    producer, tracker = make_producer(settings), DeliveryTracker()
    producer.produce(topic_name(TOPICS.policy, settings), key=pv.policy.encode(), value=encode(pv), on_delivery=tracker)
    flush_or_raise(producer, tracker)
    return pv


def wait_for(cond, timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.2)
    return cond()


def test_server_hot_reloads_and_refuses_a_tampered_version(settings):
    from trainer.serving.server import ServeConfig, build_server

    publish(settings, build_policy("lm", "lm-s", dict(CFG, seed=1)), 1)
    cfg = ServeConfig(policy="lm-s", kind="lm", init_config='{"max_new_tokens": 4}', catchup_timeout_s=60)
    server, app = build_server(settings, cfg)
    holder = server.holder
    try:
        assert holder.version == 1 and holder.published  # caught up before serving
        publish(settings, build_policy("lm", "lm-s", dict(CFG, seed=2)), 2, parent=1)
        assert wait_for(lambda: holder.version == 2), "v2 was not hot-reloaded"
        publish_tampered(settings, build_policy("lm", "lm-s", dict(CFG, seed=3)), 3)
        assert wait_for(lambda: holder.refused), "the tampered v3 was neither loaded nor refused"
        assert holder.version == 2 and holder.refused[0]["version"] == 3
        assert "tampered" in holder.refused[0]["error"]

        async def ask():
            async with TestClient(TestServer(app)) as client:
                chat = await client.post("/v1/chat/completions", json={
                    "messages": [{"role": "user", "content": "click OK"}], "logprobs": True})
                health = await client.get("/healthz")
                return await chat.json(), await health.json()

        chat, health = asyncio.run(asyncio.wait_for(ask(), 60))
        assert chat["policy_version"] == 2 and chat["choices"][0]["logprobs"]["content"]
        assert health["policy_version"] == 2 and health["refused"][0]["version"] == 3
    finally:
        app[__import__("trainer.serving.server", fromlist=["RELOADER"]).RELOADER].stop()


def produce_scored(settings, n: int, start: int = 0) -> None:
    store = BlobStore(settings.blob_root)
    producer, tracker = make_producer(settings), DeliveryTracker()
    for i in range(start, start + n):
        st = scored_trajectory(store, f"ep{i}", n_steps=2, seed=i)
        producer.produce(topic_name(TOPICS.sft, settings), key=st.episode_id.encode(), value=encode(st),
                         on_delivery=tracker)
    flush_or_raise(producer, tracker)


def test_sft_streaming_publishes_versions_and_resumes_from_its_offsets(settings, group_id):
    from infra.runtime.checkpoint import load_checkpoint
    from trainer.core.learner import LearnerState
    from trainer.sft.lm_stream import LMStreamTrainer, LMTrainConfig
    from trainer.sft.sft_samples import sft_samples

    produce_scored(settings, 4)
    cfg = LMTrainConfig(policy_name="lm-sft", policy_config='{"max_new_tokens": 4}', pretrained="", batch_trajectories=2,
                        max_wait_s=5, max_updates=2, group_id=group_id, lr=1e-3, idle_exit_s=30)
    first = LMStreamTrainer(settings, cfg, "sft", sft_samples)
    assert first.run() == 2
    versions = {pv.version: pv for pv in scan_policy_topic(settings, "lm-sft")}
    assert sorted(versions) == [1, 2] and versions[2].parent == 1
    store = BlobStore(settings.blob_root)
    for pv in versions.values():  # each loadable, hash-verified
        assert load_policy_version(pv, store).version == pv.version
    ckpt = load_checkpoint(first.ckpt_path, LearnerState)
    topic = topic_name(TOPICS.sft, settings)
    assert ckpt.state.version == 2 and sum(ckpt.offsets[topic].values()) == 4 and ckpt.state.announce is None

    produce_scored(settings, 2, start=4)  # a restarted trainer sees only the new trajectories
    cfg.max_updates, cfg.max_wait_s = 1, 60
    second = LMStreamTrainer(settings, cfg, "sft", sft_samples)
    assert second.run() == 1
    latest = max(scan_policy_topic(settings, "lm-sft"), key=lambda pv: pv.version)
    assert latest.version == 3 and latest.parent == 2 and latest.metrics["batch/trajectories"] == 2.0


def test_merge_of_two_versions_equals_the_interpolated_tensors(settings):
    from trainer.serving.merge import MergePlan, run_merge

    a, b = build_policy("lm", "lm-m", dict(CFG, seed=1)), build_policy("lm", "lm-m", dict(CFG, seed=2))
    publish(settings, a, 3)
    publish(settings, b, 5, parent=3)
    pv = run_merge(settings, MergePlan("lm-m", [3, 5], [0.25, 0.75]))
    assert pv.version == 6 and pv.parent == 5 and pv.metrics == {"merge/alpha_v3": 0.25, "merge/alpha_v5": 0.75}
    merged = load_policy_version(pv, BlobStore(settings.blob_root)).state_dict()
    sa, sb = a.state_dict(), b.state_dict()
    for key, value in merged.items():
        torch.testing.assert_close(value, 0.25 * sa[key] + 0.75 * sb[key], rtol=1e-6, atol=1e-6)

    from trainer.serving.merge import MergeError

    with pytest.raises(MergeError, match="sum to 1"):
        run_merge(settings, MergePlan("lm-m", [3, 5], [0.5, 0.6]))
