"""SFT / CT samples from scored trajectories, one training step, checkpoints (no broker)."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from PIL import Image
from serving_fixtures import scored_trajectory

from schemas.blobs import BlobStore
from trainer.sft.ct_samples import ct_samples
from infra.runtime.checkpoint import load_checkpoint
from infra.runtime.consume_loop import CheckpointFile
from trainer.core.learner import LearnerState, drop_other_weights, read_weights, write_weights
from trainer.sft.lm_stream import LMTrainConfig, train_step
from infra.runtime.policy import build_policy
from trainer.sft.sft_samples import sft_samples


@pytest.fixture
def store(tmp_path):
    return BlobStore(str(tmp_path / "blobs"))


def loader(store):
    return lambda ref: np.asarray(Image.open(io.BytesIO(store.get(ref))).convert("RGB"))


def scored_text(policy, sample) -> str:
    return policy.tok.decode([t for t, m in zip(sample.ids, sample.target) if m])


def test_sft_scores_each_steps_answer_in_the_context_it_was_written(store):
    policy = build_policy("lm", "lm-t", {})
    scored = scored_trajectory(store, "ep1", n_steps=3)
    samples = sft_samples(policy, scored, loader(store))
    assert len(samples) == 3
    for step, sample in zip(scored.trajectory.steps, samples):
        assert scored_text(policy, sample) == step.raw_output  # + <|im_end|>, which decodes to nothing
        assert sum(sample.target) == len(policy.tok.encode(step.raw_output)) + 1
    assert [len(s.images) for s in samples] == [1, 2, 3]  # screenshots so far, within max_images
    # the sample for step 2 is exactly what the policy would score for that decision
    steps = scored.trajectory.steps
    from infra.runtime.policy import PolicyInput

    img = loader(store)(steps[2].observation.screenshot)
    inp = PolicyInput(img, "Click the button.", 50, 40, history=list(steps[:2]))
    policy.blob_store = store
    assert policy.decision_sample(inp, steps[2].raw_output).ids == samples[2].ids


def test_ct_scores_the_screens_transitions_and_no_assistant_or_image_token(store):
    """CT on V(s)=0 data must not imitate the failed actions (behaviour changed on purpose: CT
    used to score every text token, the Thought / Action turns included)."""
    from schemas.prompt import IM_START

    policy = build_policy("lm", "lm-t", {})
    scored = scored_trajectory(store, "ep2", n_steps=3)
    (sample,) = ct_samples(policy, scored, loader(store))
    image_id, start = policy.tok.special("<|image|>"), policy.tok.special(IM_START)
    assert not any(m for t, m in zip(sample.ids, sample.target) if t == image_id)
    # walk the turns: no token of an assistant turn (nor any role header) is a target
    ids, target = sample.ids, sample.target
    starts = [i for i, t in enumerate(ids) if t == start] + [len(ids)]
    assistant = policy.tok.encode("assistant")
    scored_turns = []
    for a, b in zip(starts, starts[1:]):
        role_is_assistant = ids[a + 1:a + 1 + len(assistant)] == assistant
        if role_is_assistant:
            assert not any(target[a:b]), "an assistant (Thought / Action) token is a CT target"
        if any(target[a:b]):
            scored_turns.append(policy.tok.decode([t for t, m in zip(ids[a:b], target[a:b]) if m]))
    # the targets are what each action did to the screen (random screenshots: each step's differs)
    assert scored_turns == ["Observation: the screen changed."] * 2
    raw_outputs = [s.raw_output for s in scored.trajectory.steps]
    assert all(r not in policy.tok.decode([t for t, m in zip(ids, target) if m]) for r in raw_outputs)


def test_ct_transition_text_uses_what_the_rollout_recorded(store):
    from trainer.sft.ct_samples import transition_text

    steps = scored_trajectory(store, "ep4", n_steps=2).trajectory.steps
    same = steps[0].model_copy(update={"next_screenshot_sha256": steps[0].observation.screenshot.sha256,
                                       "error": "element not found"})
    assert transition_text(same, None) == "Observation: the screen did not change.\nError: element not found"
    assert transition_text(steps[1], None) == ""  # the last step: what followed was not recorded
    nxt = steps[1].model_copy(update={"observation": steps[1].observation.model_copy(update={"url": "file:///b.html"})})
    assert transition_text(steps[0], nxt).endswith("Now showing: file:///b.html")


def test_a_few_sft_steps_lower_the_loss(store):
    torch.manual_seed(0)
    policy = build_policy("lm", "lm-t", {})
    samples = sft_samples(policy, scored_trajectory(store, "ep3"), loader(store))
    opt = torch.optim.AdamW(policy.parameters(), lr=3e-3)
    cfg = LMTrainConfig(minibatch_samples=1)
    losses = [train_step(policy, opt, samples, cfg)["losses/sft_loss"] for _ in range(4)]
    assert losses[-1] < losses[0]


def test_checkpoint_round_trip(tmp_path):
    """The learner's checkpoint: infra.runtime.checkpoint's JSON (offsets by topic and partition, typed state)
    naming a weights + optimiser file written before it."""
    policy = build_policy("lm", "lm-t", {})
    policy.version = 3
    opt = torch.optim.AdamW(policy.parameters(), lr=1e-3)
    folder = tmp_path / "ckpt"
    ckpt = CheckpointFile(folder / "checkpoint.json", LearnerState)
    assert ckpt.checkpoint.state is None  # nothing yet: a fresh start
    name = write_weights(folder, 1, policy, opt)
    ckpt.checkpoint.state = LearnerState(version=3, config=policy.config_dict(), weights_file=name, updates=1,
                                         announce={"policy": "lm-t", "version": 3})
    ckpt.checkpoint.advance({("flywheel.sft.v1", 0): 5, ("flywheel.sft.v1", 2): 9})
    ckpt.save()
    again = load_checkpoint(folder / "checkpoint.json", LearnerState)
    assert again.offsets == {"flywheel.sft.v1": {0: 5, 2: 9}} and again.state.version == 3
    assert again.state.announce is not None  # announced only after the commit
    saved = read_weights(folder, again.state)
    assert torch.equal(saved["weights"]["value_head.weight"], policy.state_dict()["value_head.weight"])
    assert saved["optimizer"]["param_groups"][0]["lr"] == 1e-3
    newer = write_weights(folder, 2, policy, opt)
    drop_other_weights(folder, keep=newer)  # after the switch the old file goes
    assert sorted(p.name for p in folder.glob("weights-*")) == [newer]

