"""`flywheel bc` end to end on the real broker: demonstrations on flywheel.sft.v1 (plus a CT-only
trajectory, another task's demonstration and an undecodable record) -> behaviour cloning ->
pi_sft published as the next policy version, loadable, whose greedy clicks hit the targets."""

from __future__ import annotations

import numpy as np

from infra.runtime.kafka_clients import DeliveryTracker, flush_or_raise, make_producer, read_to_end
from infra.runtime.policy import PolicyInput, load_policy_version
from infra.runtime.topics import TOPICS, topic_name
from infra.runtime.versions import scan
from schemas.actions import Click
from schemas.blobs import BlobStore
from schemas.codec import encode
from trainer.sft.bc import run_bc
from trainer.sft.bc_config import BCConfig
from tests.fakes.clicks import make_episode, scored_trajectory


def centre(e):
    x0, y0, x1, y1 = e.target
    return Click(x=(x0 + x1) / 2 / 160, y=(y0 + y1) / 2 / 210)


def test_bc_reads_demonstrations_and_publishes_pi_sft(settings):
    store, rng = BlobStore(settings.blob_root), np.random.default_rng(0)
    producer, tracker = make_producer(settings), DeliveryTracker()
    topic = topic_name(TOPICS.sft, settings)
    eps = [make_episode("click-test", rng) for _ in range(30)]
    for k, e in enumerate(eps):
        st = scored_trajectory(e, centre(e), 0.0, f"demo-{k}", "scripted", 0, store)
        producer.produce(topic, key=st.episode_id.encode(), value=encode(st), on_delivery=tracker)
    failed = scored_trajectory(eps[0], Click(x=0.01, y=0.99), 0.0, "miss", "scripted", 0, store)  # V(s) = 0
    other = scored_trajectory(eps[1], centre(eps[1]), 0.0, "other", "scripted", 0, store)
    task = other.trajectory.task.model_copy(update={"name": "click-button"})  # not a task trained on
    other = other.model_copy(update={"trajectory": other.trajectory.model_copy(update={"task": task})})
    for st in (failed, other):
        producer.produce(topic, key=st.episode_id.encode(), value=encode(st), on_delivery=tracker)
    producer.produce(topic, key=b"junk", value=b"{not json", on_delivery=tracker)
    flush_or_raise(producer, tracker)

    cfg = BCConfig(policy_name="pixel-bc-test", suite="quick", tasks=["click-test"], demos_per_task=20, epochs=30,
                   policy_config='{"grid": 8, "channels": [8, 16, 16]}')
    out = run_bc(cfg, settings)
    assert out["demos"] == {"click-test": 20} and out["steps"] == 20
    versions = [v for v in scan(settings, "pixel-bc-test")]
    assert [v.version for v in versions] == [out["version"]] == [0]
    assert versions[0].metrics["batch/demos"] == 20
    policy = load_policy_version(versions[0], store)
    held_out = [make_episode("click-test", np.random.default_rng(99)) for _ in range(20)]
    hits = [e.reward(d.action.x, d.action.y) for e, d in
            zip(held_out, policy.act([PolicyInput(e.image, e.instruction, 160, 210) for e in held_out], greedy=True))]
    assert np.mean(hits) >= 0.7, hits  # random clicking on 8 x 8 cells hits about 1 time in 15
    letters = list(read_to_end(settings, topic_name(TOPICS.dlq, settings)))
    assert len(letters) == 1 and b"bc" in letters[0].value()
    # a second run publishes the next version, parented on the first
    again = run_bc(cfg, settings)
    assert again["version"] == 1
    assert {v.version: v.parent for v in scan(settings, "pixel-bc-test")}[1] == 0


def test_bc_clones_the_language_policy_with_translated_copies(settings):
    """`flywheel bc --policy-kind lm`: the same snapshot, rendered in the policy's context format,
    plus two translated copies of each first step; pi_sft is an lm version under which the
    demonstrated answers are likelier than under the model it started from."""
    import torch

    from infra.runtime.policy import build_policy
    from trainer.sft.bc import read_demonstrations, select_demos
    from trainer.policies.lm.bc import lm_examples

    store, rng = BlobStore(settings.blob_root), np.random.default_rng(1)
    producer, tracker = make_producer(settings), DeliveryTracker()
    for k in range(6):
        e = make_episode("click-test", rng)
        st = scored_trajectory(e, centre(e), 0.0, f"lm-demo-{k}", "scripted", 0, store)
        producer.produce(topic_name(TOPICS.sft, settings), key=st.episode_id.encode(), value=encode(st), on_delivery=tracker)
    flush_or_raise(producer, tracker)

    cfg = BCConfig(policy_kind="lm", pretrained="", policy_name="lm-bc-test", suite="quick", tasks=["click-test"],
                   demos_per_task=6, epochs=4, lr=3e-3, shift_copies=2)
    out = run_bc(cfg, settings)
    (pv,) = scan(settings, "lm-bc-test")
    assert pv.kind == "lm" and pv.version == out["version"] == 0
    assert pv.metrics["batch/demos"] == 6 and pv.metrics["batch/steps"] == 6 * 3  # each step and 2 copies
    assert out["train_match"] == {} and out["loss"] > 0

    demos = select_demos(read_demonstrations(settings, cfg), ["click-test"], 6)
    start = build_policy("lm", "lm-bc-test", cfg.policy_overrides())
    samples, skipped = lm_examples(start, demos, store, copies=0, max_frac=0.3, seed=0)
    assert len(samples) == 6 and not skipped
    cloned = load_policy_version(pv, store)
    with torch.no_grad():
        before, after = start.sequence_logprobs(samples), cloned.sequence_logprobs(samples)
    assert after.mean() > before.mean() + 1.0, (before, after)
