"""The Hugging Face LM policy from a tiny config: act, token log-probs, UI-TARS context."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from schemas.actions import Click
from schemas.blobs import BlobStore
from schemas.events import BlobRef, Observation, Step
from infra.runtime.policy import build_policy
from infra.runtime.policy import PolicyInput
from trainer.policies.lm.model import LMPolicy
from trainer.policies.lm.text import IMAGE, Rendered, format_step_output

CFG = {"max_new_tokens": 12}


@pytest.fixture(scope="module")
def policy() -> LMPolicy:
    return build_policy("lm", "lm-test", CFG)


def screen(seed: int, h: int = 120, w: int = 160) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 255, (h, w, 3), dtype=np.uint8)


def inputs(n: int = 3) -> list[PolicyInput]:
    return [PolicyInput(screen(i), "click the OK button" + " please" * i, 160, 120) for i in range(n)]


def step(i: int, ref: BlobRef, raw: str = "") -> Step:
    obs = Observation(screenshot=ref, screen_width=160, screen_height=120, instruction="go")
    return Step(episode_id="ep", ts=1.0, step_index=i, started_at=1.0, observation=obs, thought=f"step {i}",
                action=Click(x=0.5, y=0.25), raw_output=raw, policy="lm-test", policy_version=0, logprob=-1.0)


def test_act_writes_text_and_flags_what_does_not_parse(policy):
    torch.manual_seed(0)
    decisions = policy.act(inputs())
    assert len(decisions) == 3
    for d in decisions:
        assert d.raw_output and math.isfinite(d.logprob) and d.logprob < 0 and isinstance(d.value, float)
        assert (d.action is None) == (d.parse_error is not None)  # a random model's bytes never parse
        assert d.action is None and d.parse_error


def test_act_logprob_equals_evaluate_logprob(policy):
    torch.manual_seed(1)
    inps = inputs()
    decisions = policy.act(inps)
    samples = [policy.decision_sample(inp, d.raw_output) for inp, d in zip(inps, decisions)]
    recomputed = policy.sequence_logprobs(samples)
    np.testing.assert_allclose(recomputed.detach().numpy(), [d.logprob for d in decisions], rtol=1e-4, atol=1e-3)


def test_sampled_token_logprobs_match_a_full_forward(policy):
    """The KV-cached, left-padded sampler and the right-padded evaluate agree token by token."""
    torch.manual_seed(2)
    contexts = [policy.render(policy.context(inp)) for inp in inputs()]
    gens = policy.generate(contexts)
    samples = [Rendered(c.ids + g.token_ids, c.images, [False] * len(c.ids) + [True] * len(g.token_ids))
               for c, g in zip(contexts, gens)]
    batch = policy.make_batch(samples)
    logprobs, values, entropy = policy.evaluate_tokens(batch)
    for i, g in enumerate(gens):
        got = logprobs[i][batch.target[i]].detach().numpy()
        np.testing.assert_allclose(got, g.token_logprobs, rtol=1e-4, atol=1e-4)
    assert logprobs.shape == values.shape == entropy.shape == batch.target.shape
    assert bool((entropy[batch.target] > 0).all()) and float(entropy[~batch.target].detach().abs().sum()) == 0.0


def test_canonical_output_scores_text_plus_end_token(policy):
    text = "Thought: the OK button\nAction: click(point='<point>10 20</point>')"
    sample = policy.decision_sample(inputs(1)[0], text)
    scored = [t for t, m in zip(sample.ids, sample.target) if m]
    assert scored == policy.tok.encode(text) + [policy.eos]


def test_greedy_is_deterministic(policy):
    a = policy.act(inputs(2), greedy=True)
    b = policy.act(inputs(2), greedy=True)
    assert [d.raw_output for d in a] == [d.raw_output for d in b]
    assert [d.logprob for d in a] == pytest.approx([d.logprob for d in b], abs=1e-5)


def test_context_keeps_last_screenshots_and_full_action_history(tmp_path):
    store = BlobStore(str(tmp_path / "blobs"))
    from PIL import Image

    refs = [store.put_image(Image.fromarray(screen(10 + i))) for i in range(7)]
    history = [step(i, refs[i], raw=f"Thought: t{i}\nAction: wait()" if i % 2 else "") for i in range(7)]
    p = LMPolicy("lm-test", dict(CFG, max_images=5), blob_store=store)
    inp = PolicyInput(screen(99), "do it", 160, 120, history=history)
    rendered = p.render(p.context(inp))
    assert len(rendered.images) == 5  # 4 earlier screenshots + the current one
    assert rendered.ids.count(p.tok.special(IMAGE)) == 5 * p.vision.n_tokens
    text = p.tok.decode(rendered.ids)
    for i in range(7):  # every earlier action stays in context as an assistant turn
        assert format_step_output(history[i]) in text
    assert "Action: click(" in format_step_output(history[0])  # rebuilt from the Action when no raw output


def test_weights_round_trip_through_safetensors(policy):
    from safetensors.torch import load, save

    clone = build_policy("lm", "lm-test", CFG)
    state = {k: v.detach().clone() for k, v in policy.state_dict().items()}
    clone.load_state_dict(load(save(state)), strict=True)
    sample = policy.decision_sample(inputs(1)[0], "Action: wait()")
    with torch.no_grad():
        assert float(clone.sequence_logprobs([sample])) == pytest.approx(float(policy.sequence_logprobs([sample])), abs=1e-6)
