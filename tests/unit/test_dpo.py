"""DPO (trainer.dpo.train, trainer.dpo.inputs): the loss against a hand computation, which pairs each
policy kind can score, and a few DPO steps widen the chosen-minus-rejected margin of the pixel
policy and of the language policy. No Kafka."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch
from PIL import Image

from infra.runtime.policy import build_policy
from schemas import actions as A
from schemas.blobs import BlobStore
from schemas.events import BlobRef, Observation, PairSide, PreferencePair, Step, TaskSpec
from trainer.dpo.train import dpo_loss, dpo_train, reference_logprobs, select_pairs
from tests.unit.devices import DEVICES
from trainer.dpo.inputs import pair_inputs
from trainer.policies.lm.pairs import LMPairs, side_text
from trainer.policies.pixel.pairs import PixelPairs

INSTRUCTION = 'Enter "bob" into the text field and press Submit.'


# ---------------------------------------------------------------- the loss


def test_loss_and_statistics_match_a_hand_computation():
    lc, lr_ = torch.tensor([-1.0, -2.0]), torch.tensor([-3.0, -1.0])
    rc, rr = torch.tensor([-2.0, -2.0]), torch.tensor([-2.0, -2.0])
    loss, stats = dpo_loss(lc, lr_, rc, rr, beta=0.5)
    # pair 1: 0.5 * ((-1 + 3) - 0) = 1; pair 2: 0.5 * ((-2 + 1) - 0) = -0.5
    want = (math.log1p(math.exp(-1.0)) + math.log1p(math.exp(0.5))) / 2
    assert float(loss) == pytest.approx(want, abs=1e-6)
    assert stats["dpo/accuracy"] == 0.5
    assert stats["dpo/chosen_reward"] == pytest.approx((0.5 + 0.0) / 2)
    assert stats["dpo/rejected_reward"] == pytest.approx((-0.5 + 0.5) / 2)
    assert stats["dpo/reward_margin"] == pytest.approx((1.0 - 0.5) / 2)


def test_at_the_reference_the_loss_is_log_two_and_its_gradient_prefers_the_chosen_side():
    lc, lr_ = torch.tensor([-1.5], requires_grad=True), torch.tensor([-0.5], requires_grad=True)
    loss, stats = dpo_loss(lc, lr_, lc.detach(), lr_.detach(), beta=0.2)
    assert stats["losses/dpo_loss"] == pytest.approx(math.log(2)) and stats["dpo/accuracy"] == 0.0
    loss.backward()
    assert float(lc.grad) == pytest.approx(-0.1) and float(lr_.grad) == pytest.approx(0.1)  # -beta/2, +beta/2


def test_the_nll_term_adds_the_chosen_sides_per_token_nll_at_its_weight():
    lc, lr_ = torch.tensor([-1.0, -2.0], requires_grad=True), torch.tensor([-3.0, -1.0])
    rc, rr = torch.tensor([-2.0, -2.0]), torch.tensor([-2.0, -2.0])
    plain, _ = dpo_loss(lc, lr_, rc, rr, beta=0.5)
    loss, stats = dpo_loss(lc, lr_, rc, rr, beta=0.5, chosen_tokens=torch.tensor([4.0, 2.0]), nll_weight=0.5)
    nll = (1.0 / 4 + 2.0 / 2) / 2
    assert stats["dpo/chosen_nll"] == pytest.approx(nll)
    assert float(loss.detach()) == pytest.approx(float(plain.detach()) + 0.5 * nll, abs=1e-6)
    assert stats["losses/dpo_loss"] == pytest.approx(float(loss.detach()))
    loss.backward()
    plain_grad = torch.autograd.grad(dpo_loss(lc, lr_, rc, rr, beta=0.5)[0], lc)[0]
    assert torch.allclose(lc.grad - plain_grad, torch.tensor([-0.5 / 4 / 2, -0.5 / 2 / 2]))  # raises chosen
    with pytest.raises(ValueError, match="token count"):
        dpo_loss(lc, lr_, rc, rr, beta=0.5, nll_weight=1.0)


def test_nll_weight_is_validated():
    from infra.runtime.config import ConfigError
    from trainer.dpo.config import DPOConfig

    assert DPOConfig().nll_weight == 0.0
    for bad in (-0.1, float("nan"), float("inf")):
        with pytest.raises(ConfigError, match="nll_weight"):
            DPOConfig(nll_weight=bad).validate()
    for bad in (0.0, float("nan"), float("inf")):
        with pytest.raises(ConfigError, match="beta"):
            DPOConfig(beta=bad).validate()


# ---------------------------------------------------------------- pairs as inputs


@pytest.fixture
def store(tmp_path):
    return BlobStore(str(tmp_path / "blobs"))


def screenshot(store, seed, w=160, h=210):
    img = np.random.default_rng(seed).integers(0, 255, (h, w, 3), dtype=np.uint8)
    return store.put_image(Image.fromarray(img))


def observation(store, seed, w=160, h=210):
    return Observation(screenshot=screenshot(store, seed, w, h), screen_width=w, screen_height=h, instruction=INSTRUCTION)


def step(store, i, action, raw=""):
    return Step(episode_id=f"ep", ts=1.0, step_index=i, started_at=1.0, observation=observation(store, 100 + i),
                action=action, raw_output=raw, policy="p", policy_version=2, logprob=-1.0)


def pair(store, n, chosen, rejected, kind="error_correction", raw="", history=0, seed=None, w=160, h=210):
    tau = history - (kind == "post_reflection")
    steps = [step(store, i, A.Click(x=0.3, y=0.6)) for i in range(history)]
    return PreferencePair(
        episode_id=f"ep-{n}", kind=kind, task=TaskSpec(task_id="t", suite="miniwob", name="enter-text", seed=n),
        tau=tau, step_index=history, observation=observation(store, seed if seed is not None else n, w, h),
        history=steps, chosen=PairSide(action=chosen),
        rejected=None if rejected is None else PairSide(action=rejected, raw_output=raw), annotator="scripted-v1",
        policy="p", policy_version=2, created_at=1.0)


def pixel_policy():
    return build_policy("pixel", "p", {"action_types": ["click", "type", "press_enter", "scroll", "finished"],
                                       "channels": [4, 8, 8], "seed": 1})


def training_pairs(store, n=12):
    """Chosen: a click left, or the quoted text; rejected: a click right, or press_enter."""
    out = []
    for k in range(n):
        if k % 2:
            out.append(pair(store, k, A.Type(content="bob"), A.PressEnter(), history=k % 3))
        else:
            out.append(pair(store, k, A.Click(x=0.2, y=0.6), A.Click(x=0.8, y=0.6), kind="post_reflection",
                            history=1 + k % 2))
    return out


def test_pixel_inputs_skip_what_the_policy_cannot_score(store):
    policy = pixel_policy()
    pairs = training_pairs(store, 4) + [
        pair(store, 10, A.Click(x=0.2, y=0.6), None, kind="post_reflection", history=1),  # episode stopped
        pair(store, 11, A.Click(x=0.2, y=0.6), A.PressEnter()),  # made an unparsed rejected action below
        pair(store, 12, A.Click(x=0.2, y=0.6), A.Click(x=0.201, y=0.601)),  # one grid cell: one decision
        pair(store, 13, A.Type(content="alice"), A.PressEnter()),  # text not in the instruction
    ]
    pairs[5] = pairs[5].model_copy(update={"rejected": PairSide(action=None, raw_output="Action: ?")})
    gone = pair(store, 14, A.Click(x=0.2, y=0.6), A.PressEnter())
    gone = gone.model_copy(update={"observation": gone.observation.model_copy(
        update={"screenshot": BlobRef(sha256="e" * 64, uri="file:///gone")})})
    data, skipped = pair_inputs(policy, pairs + [gone], store)
    assert isinstance(data, PixelPairs) and len(data) == 4
    assert dict(skipped) == {"no_rejected_side": 1, "unrepresentable": 2, "indistinguishable": 1, "screenshot_missing": 1}
    assert data.obs.shape == (4, 1 + 3, 160, 160)
    # the history is drawn in: the same screen with and without earlier steps differs
    with_history = pair_inputs(policy, [pair(store, 20, A.PressEnter(), A.Click(x=0.5, y=0.5), history=2, seed=7)], store)[0]
    without = pair_inputs(policy, [pair(store, 21, A.PressEnter(), A.Click(x=0.5, y=0.5), history=0, seed=7)], store)[0]
    assert not torch.equal(with_history.obs, without.obs)
    assert pair_inputs(policy, pairs[4:6], store)[0] is None


def test_language_sides_are_the_recorded_text_or_the_rendered_action():
    assert side_text(PairSide(action=None, raw_output="Thought: x\nAction: wait()"), 160, 210, "qwen25vl") \
        == "Thought: x\nAction: wait()"
    assert side_text(PairSide(action=A.PressEnter()), 160, 210, "qwen25vl") == "Action: press_enter()"
    assert side_text(PairSide(action=A.Type(content="bob"), thought="type it"), 160, 210, "qwen25vl") \
        == "Thought: type it\nAction: type(content='bob')"
    assert side_text(PairSide(action=None), 160, 210, "qwen25vl") is None


def test_select_pairs_keeps_one_per_id_and_filters_kind_and_annotator(store):
    a = pair(store, 1, A.PressEnter(), A.Click(x=0.1, y=0.5))
    b = pair(store, 2, A.PressEnter(), A.Click(x=0.1, y=0.5), kind="post_reflection", history=1)
    c = a.model_copy(update={"annotator": "judge-1"})
    again = a.model_copy(update={"created_at": 9.0})
    assert select_pairs([a, b, c, again], ["error_correction", "post_reflection"], []) == sorted(
        [again, b, c], key=lambda p: p.event_id)
    assert select_pairs([a, b, c], ["post_reflection"], []) == [b]
    assert select_pairs([a, b, c], ["error_correction"], ["judge-1"]) == [c]


# ---------------------------------------------------------------- a few DPO steps, both kinds


def margins(policy, data, ref_c, ref_r):
    with torch.no_grad():
        c, r = data.logprobs(policy, list(range(len(data))))
    return (c - r) - (ref_c - ref_r)


def test_dpo_steps_widen_the_margin_of_the_pixel_policy(store):
    torch.manual_seed(0)
    policy = pixel_policy()
    data, _ = pair_inputs(policy, training_pairs(store), store)
    ref_c, ref_r = reference_logprobs(policy, data)
    assert torch.allclose(margins(policy, data, ref_c, ref_r), torch.zeros(len(data)))
    seen: list[tuple[int, float]] = []  # after each epoch: its number and the margins then
    history = dpo_train(policy, data, ref_c, ref_r, beta=0.5, epochs=5, lr=1e-2, minibatch_size=4,
                        on_epoch=lambda n: seen.append((n, float(margins(policy, data, ref_c, ref_r).mean()))))
    assert [n for n, _ in seen] == [1, 2, 3, 4, 5] and seen[0][1] < seen[-1][1]
    assert data.chosen_tokens([0, 1]).tolist() == [1.0, 1.0]
    after = margins(policy, data, ref_c, ref_r)
    assert bool((after > 0).all()), after
    assert history[-1]["losses/dpo_loss"] < history[0]["losses/dpo_loss"] < math.log(2) + 1e-6
    assert history[-1]["dpo/accuracy"] == 1.0 and history[-1]["dpo/reward_margin"] > 0


def test_accumulated_passes_take_the_same_step_as_one_pass(store, monkeypatch):
    """micro_batch splits a minibatch into passes whose gradients add up to the one-pass gradient
    (SGD in place of Adam: its step is linear in the gradient, so the weights show it)."""
    monkeypatch.setattr("trainer.dpo.train.make_optimizer", lambda policy, lr, mult=1.0: torch.optim.SGD(policy.parameters(), lr=lr))
    torch.manual_seed(0)
    start = pixel_policy()
    data, _ = pair_inputs(start, training_pairs(store), store)
    ref_c, ref_r = reference_logprobs(start, data)
    with torch.no_grad():  # move off the reference, so the sides' log-ratios differ per pair
        for p in start.parameters():
            p.add_(0.05 * torch.randn_like(p))
    runs = {}
    for micro in (0, 1, 3):
        policy = copy.deepcopy(start)
        history = dpo_train(policy, data, ref_c, ref_r, beta=0.5, epochs=2, lr=0.5, minibatch_size=len(data),
                            micro_batch=micro)
        runs[micro] = (policy.state_dict(), history)
    one, _ = runs[0]
    moved = max(float((one[k] - v).abs().max()) for k, v in start.state_dict().items())
    assert moved > 1e-3, "the step did not move the weights: the comparison would prove nothing"
    for micro in (1, 3):
        weights, history = runs[micro]
        assert max(float((weights[k] - one[k]).abs().max()) for k in one) < 1e-5, micro
        for k, v in runs[0][1][-1].items():
            assert history[-1][k] == pytest.approx(v, rel=1e-4, abs=1e-6), (micro, k)


def test_micro_batch_defaults_per_kind_and_is_validated():
    from infra.runtime.config import ConfigError
    from trainer.dpo.config import DPOConfig

    assert DPOConfig().passes("lm") == 2 and DPOConfig().passes("pixel") == 0
    assert DPOConfig(micro_batch=5).passes("lm") == 5 and DPOConfig(micro_batch=0).passes("lm") == 0
    with pytest.raises(ConfigError, match="micro_batch"):
        DPOConfig(micro_batch=-2).validate()


@pytest.mark.parametrize("device", DEVICES)
def test_dpo_steps_widen_the_margin_of_the_language_policy(store, device):
    torch.manual_seed(0)
    policy = build_policy("lm", "lm-test", {"max_new_tokens": 8, "max_images": 2}).to(device)
    pairs = [pair(store, k, A.Click(x=0.25, y=0.5), A.Click(x=0.75, y=0.5), raw="Thought: right\nAction: click(point='<point>120 105</point>')",
                  kind="post_reflection" if k % 2 else "error_correction", history=k % 2 + k % 3, w=64, h=48)
             for k in range(4)]
    data, skipped = pair_inputs(policy, pairs, store)
    assert isinstance(data, LMPairs) and len(data) == 4 and not skipped
    assert sum(data.chosen[0].target) > 0 and data.chosen[0].ids != data.rejected[0].ids
    assert data.chosen_tokens([0, 2]).tolist() == [float(sum(data.chosen[i].target)) for i in (0, 2)]
    part = data.subset([3, 1])
    assert len(part) == 2 and part.chosen == [data.chosen[3], data.chosen[1]] and part.rejected[1] is data.rejected[1]
    ref_c, ref_r = reference_logprobs(policy, data)
    dpo_train(policy, data, ref_c, ref_r, beta=0.5, epochs=3, lr=1e-3, minibatch_size=2)
    after = margins(policy, data, ref_c, ref_r)
    assert bool((after > 0).all()), after


def test_head_lr_mult_steps_the_parts_trained_from_scratch_at_its_multiple(store):
    """The language policy's patch adapter steps at lr * head_lr_mult, its LM at lr (before stop 24
    dpo_train ignored head_lr_mult and every part stepped at lr)."""
    torch.manual_seed(0)
    policy = build_policy("lm", "lm-test", {"max_new_tokens": 8, "max_images": 2})
    pairs = [pair(store, k, A.Click(x=0.25, y=0.5), A.Click(x=0.75, y=0.5), w=64, h=48) for k in range(2)]
    data, _ = pair_inputs(policy, pairs, store)
    ref_c, ref_r = reference_logprobs(policy, data)
    lm0 = copy.deepcopy(policy.lm.state_dict())
    vision0 = copy.deepcopy(policy.vision.state_dict())
    dpo_train(policy, data, ref_c, ref_r, beta=0.5, epochs=1, lr=1e-12, minibatch_size=2, head_lr_mult=1e10)
    lm_moved = max(float((policy.lm.state_dict()[k] - v).abs().max()) for k, v in lm0.items())
    vision_moved = max(float((policy.vision.state_dict()[k] - v).abs().max()) for k, v in vision0.items())
    assert lm_moved < 1e-9 and vision_moved > 1e-4, (lm_moved, vision_moved)


def test_sample_indices_is_seeded_bounded_and_keeps_order():
    from trainer.dpo.train import sample_indices

    a = sample_indices(50, 8, seed=1)
    assert len(a) == 8 and a == sorted(a) and len(set(a)) == 8 and set(a) <= set(range(50))
    assert a == sample_indices(50, 8, seed=1) and a != sample_indices(50, 8, seed=2)
    assert sample_indices(50, 0, seed=1) == list(range(50)) and sample_indices(50, 80, seed=1) == list(range(50))


def test_a_subset_of_pairs_scores_as_the_same_pairs_did(store):
    torch.manual_seed(0)
    policy = pixel_policy()
    data, _ = pair_inputs(policy, training_pairs(store), store)
    keep = [len(data) - 1, 0]
    c_all, r_all = data.logprobs(policy, keep)
    c_sub, r_sub = data.subset(keep).logprobs(policy, [0, 1])
    assert len(data.subset(keep)) == 2
    assert torch.allclose(c_all, c_sub) and torch.allclose(r_all, r_sub)


def test_max_pairs_must_not_be_negative():
    from infra.runtime.config import ConfigError
    from trainer.dpo.config import DPOConfig

    with pytest.raises(ConfigError, match="max_pairs"):
        DPOConfig(max_pairs=-1).validate()


def test_a_pointer_policy_skips_a_pair_whose_two_clicks_fall_in_one_patch(store):
    """Two clicks 0.05 apart are different text but one location token of a pointer policy."""
    policy = build_policy("lm", "lm-pointer", {"max_new_tokens": 8, "max_images": 2, "pointer": True,
                                               "coord_mode": "1000"})
    same_patch = pair(store, 0, A.Click(x=0.30, y=0.5), A.Click(x=0.35, y=0.5), w=64, h=48)
    apart = pair(store, 1, A.Click(x=0.10, y=0.5), A.Click(x=0.90, y=0.5), w=64, h=48)
    data, skipped = pair_inputs(policy, [same_patch, apart], store)
    assert skipped == {"indistinguishable": 1} and len(data) == 1
    assert data.chosen[0].ids != data.rejected[0].ids
