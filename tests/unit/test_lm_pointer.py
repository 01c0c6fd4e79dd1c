"""The language policy's pointer: location tokens for clicks, UI-TARS text outside the model."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from infra.runtime.policy import PolicyInput, build_policy
from schemas.uitars import parse_output, render_output
from schemas.actions import Click
from trainer.sft.lm_config import LMTrainConfig
from trainer.sft.lm_stream import train_step
from trainer.policies.lm.model import tiny_lm_config
from trainer.policies.lm.pointer import PointerCodec, PointerTokenizer, loc_name
from trainer.policies.lm.text import ByteTokenizer

SIDE = 4  # image_size 32 / patch 8
CFG = tiny_lm_config(pointer=True, coord_mode="1000", image_size=32, patch=8, max_images=2, max_new_tokens=48)


def test_every_patch_centre_maps_back_to_its_patch_and_text_round_trips():
    codec = PointerCodec(SIDE)
    for k in range(SIDE * SIDE):
        assert codec.patch(*codec.centre(k)) == k
    text = "Thought: go\nAction: click(point='<point>488 681</point>')"
    model = codec.to_model(text)
    assert model == f"Thought: go\nAction: click(point='<point>{loc_name(9)}</point>')"  # row 2, column 1
    assert codec.to_model(codec.to_uitars(model)) == model
    assert codec.to_uitars(model) == "Thought: go\nAction: click(point='<point>375 625</point>')"
    assert codec.to_model("click(point='<point>1000 1000</point>')") == f"click(point='<point>{loc_name(15)}</point>')"
    assert codec.to_uitars(loc_name(99)) == loc_name(99)  # outside the grid: left as written
    assert codec.to_model("type(content='no point')") == "type(content='no point')"


def test_location_tokens_round_trip_through_the_tokenizer():
    tok = PointerTokenizer(ByteTokenizer(), SIDE * SIDE)
    text = f"a{loc_name(0)}b{loc_name(15)}{loc_name(16)}"
    ids = tok.encode(text)
    assert ids.count(tok.base) == 1 and ids.count(tok.base + 15) == 1
    assert max(ids) == tok.base + 15  # loc_16 is outside the grid: plain text
    assert tok.decode(ids) == text
    assert tok.vocab_size == tok.base + SIDE * SIDE


@pytest.fixture(scope="module")
def policy():
    torch.manual_seed(0)
    return build_policy("lm", "pointer-test", CFG)


def screen_at(k: int) -> np.ndarray:
    """A black 32 x 32 screen whose patch ``k`` is white."""
    img = np.zeros((32, 32, 3), dtype=np.uint8)
    r, c = divmod(k, SIDE)
    img[r * 8:(r + 1) * 8, c * 8:(c + 1) * 8] = 255
    return img


def screens(n: int, seed: int) -> list[tuple[np.ndarray, int]]:
    rng = random.Random(seed)
    return [(screen_at(k), k) for k in (rng.randrange(SIDE * SIDE) for _ in range(n))]


def inp(img: np.ndarray) -> PolicyInput:
    return PolicyInput(img, "Click the white square.", 32, 32, history=[])


def test_a_pointer_policy_reports_uitars_text_and_its_exact_behaviour_logprob(policy):
    inputs = [inp(img) for img, _ in screens(4, seed=1)]
    decisions = policy.act(inputs)
    for d in decisions:
        assert "<|loc_" not in d.raw_output  # the reported text is UI-TARS's
    samples = [policy.decision_sample(i, d.raw_output) for i, d in zip(inputs, decisions)]
    logprob, _, _ = policy.evaluate(samples)
    assert logprob.tolist() == pytest.approx([d.logprob for d in decisions], abs=1e-3)


def test_a_written_point_is_scored_as_its_location_token(policy):
    answer = render_output("", Click(x=0.3, y=0.9), 32, 32, "1000")
    rendered = policy.render(policy.context(inp(screens(1, 2)[0][0])), answer, score="last")
    scored = policy.tok.decode([t for t, s in zip(rendered.ids, rendered.target) if s])
    assert scored == f"Action: click(point='<point>{loc_name(3 * SIDE + 1)}</point>')"  # x 0.3: column 1, y 0.9: row 3


def test_a_pointer_needs_relative_coordinates_and_a_screenshot():
    with pytest.raises(ValueError, match="coord_mode '1000'"):
        build_policy("lm", "bad", tiny_lm_config(pointer=True))
    with pytest.raises(ValueError, match="max_images >= 1"):
        build_policy("lm", "bad", tiny_lm_config(pointer=True, coord_mode="1000", max_images=0))


def test_sft_teaches_the_pointer_where_to_click():
    """Behaviour cloning on screens with one white patch: the tiny model learns to point at it
    (chance: 1 in 16)."""
    torch.manual_seed(0)
    policy = build_policy("lm", "pointer-learn", CFG)
    train = [(img, Click(x=PointerCodec(SIDE).centre(k)[0] / 1000, y=PointerCodec(SIDE).centre(k)[1] / 1000))
             for img, k in screens(64, seed=4)]
    samples = [policy.render(policy.context(inp(img)), render_output("", act, 32, 32, "1000"), score="last")
               for img, act in train]
    optimizer = torch.optim.AdamW(policy.param_groups(3e-3, 1.0), lr=3e-3)
    cfg = LMTrainConfig(lr=3e-3, minibatch_samples=16)
    rng = random.Random(0)
    for _ in range(60):
        train_step(policy, optimizer, rng.sample(samples, 16), cfg)
    test = screens(32, seed=5)
    decisions = policy.act([inp(img) for img, _ in test], greedy=True)
    hits = 0
    for d, (_, k) in zip(decisions, test):
        parsed = parse_output(d.raw_output, 32, 32, coord_mode="1000").action
        hits += parsed is not None and PointerCodec(SIDE).patch(parsed.x * 1000, parsed.y * 1000) == k
    assert hits / len(test) >= 0.8, [d.raw_output for d in decisions[:3]]
    # a sampled location token's log-prob, left-padded among longer contexts, is what the trainer recomputes
    inputs = [PolicyInput(img, "Click the white square." + " now" * (i % 3), 32, 32, history=[])
              for i, (img, _) in enumerate(test[:6])]
    gens = policy.generate([policy.render(policy.context(i)) for i in inputs], greedy=True)
    pointed = [(i, g) for i, g in zip(inputs, gens) if policy.canonical(g) and any(t >= policy.tok.base for t in g.token_ids)]
    assert pointed, [g.text for g in gens]
    logprob, _, _ = policy.evaluate([policy.decision_sample(i, policy.written(g.text)) for i, g in pointed])
    assert logprob.tolist() == pytest.approx([sum(g.token_logprobs) for _, g in pointed], abs=1e-3)


def test_a_point_the_model_wrote_in_digits_is_reported_at_its_patch_centre(policy):
    """What the sandbox executes is what the trainer scores: the location token of that patch."""
    text = "Action: click(point='<point>62 937</point>')"
    assert policy.written(text) == "Action: click(point='<point>125 875</point>')"  # column 0, row 3
    assert policy.written(f"Action: click(point='<point>{loc_name(12)}</point>')") == policy.written(text)


def test_written_text_is_a_fixed_point_even_with_digits_beside_a_location_token(policy):
    from trainer.policies.lm.pointer import POINT_RE

    codec = PointerCodec(SIDE)
    for text in (f"click(point='<point>12{loc_name(3)}</point>')", f"click(point='<point>{loc_name(3)}5</point>')",
                 f"click(point='<point>{loc_name(3)}</point>') 7 8"):
        once = policy.written(text)
        assert policy.written(once) == once, text
        for x, y in POINT_RE.findall(once):  # every reported point is a patch centre: the action scored
            assert codec.centre(codec.patch(float(x), float(y))) == (int(x), int(y))


def test_sft_and_ct_of_a_pointer_policy_read_the_parsed_action_not_another_policys_text(tmp_path):
    import io

    from PIL import Image

    from schemas.blobs import BlobStore
    from serving_fixtures import scored_trajectory
    from trainer.sft.ct_samples import ct_samples
    from trainer.sft.sft_samples import sft_samples

    store = BlobStore(str(tmp_path / "blobs"))
    scored = scored_trajectory(store, "ep", n_steps=3)  # text in pixels of a 50 x 40 screen: (25, 20)

    def load(ref):
        return np.asarray(Image.open(io.BytesIO(store.get(ref))).convert("RGB"))

    policy = build_policy("lm", "pointer-sft", CFG)
    centre = policy.tok.base + 2 * SIDE + 2  # Click(0.5, 0.5): row 2, column 2
    first = sft_samples(policy, scored, load)[0]
    assert [t for t, m in zip(first.ids, first.target) if m and t >= policy.tok.base] == [centre]
    (ct,) = ct_samples(policy, scored, load)
    assert ct.ids.count(centre) == 2 and policy.tok.base not in ct.ids  # read as (0.5, 0.5), not as (25, 20)


def test_versions_from_before_the_pointer_merge_with_their_successors():
    from types import SimpleNamespace

    from trainer.serving.merge import full_config

    old = SimpleNamespace(kind="lm", config={"max_new_tokens": 12})
    new = SimpleNamespace(kind="lm", config={"max_new_tokens": 12, "pointer": False})
    assert full_config(old) == full_config(new)
    assert full_config(SimpleNamespace(kind="lm", config={"pointer": True}))["pointer"] is True
