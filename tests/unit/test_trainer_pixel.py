"""Pixel policy: act/evaluate consistency, action mapping, registry, hash-verified loading."""

import numpy as np
import pytest
import torch

from infra.runtime.errors import UserError
from schemas.actions import Click, Wait
from schemas.blobs import BlobStore
from infra.runtime.policy import PolicyIntegrityError, build_policy, load_policy_version
from infra.runtime.policy import PolicyInput
from trainer.core.publish import make_version, save_weights
from tests.fakes.clicks import make_episode


def _inputs(n, task="click-test-2", seed=0):
    rng = np.random.default_rng(seed)
    eps = [make_episode(task, rng) for _ in range(n)]
    return eps, [PolicyInput(e.image, e.instruction, 160, 210) for e in eps]


def _perturb(policy):
    with torch.no_grad():  # the heads start at zero (uniform); make them non-trivial
        for p in policy.parameters():
            p.add_(0.3 * torch.randn_like(p))


def test_act_logprob_equals_evaluate_logprob():
    torch.manual_seed(0)
    policy = build_policy("pixel", "p", {"action_types": ["click", "wait", "left_double"], "grid": 8, "seed": 1})
    _perturb(policy)
    _, inputs = _inputs(12)
    decisions = policy.act(inputs)
    images = torch.stack([policy.preprocess(i.image) for i in inputs])
    logprob, value, entropy = policy.evaluate(images, [i.instruction for i in inputs], [d.action for d in decisions])
    torch.testing.assert_close(logprob, torch.tensor([d.logprob for d in decisions]), atol=1e-5, rtol=0)
    torch.testing.assert_close(value, torch.tensor([d.value for d in decisions]), atol=1e-5, rtol=0)
    assert (entropy > 0).all()
    greedy = policy.act(inputs, greedy=True)
    assert [d.action for d in greedy] == [d.action for d in policy.act(inputs, greedy=True)]


def test_uniform_init_and_click_at_cell_centre():
    policy = build_policy("pixel", "p", {"grid": 4, "crop": [0.0, 0.0, 1.0, 1.0]})
    _, inputs = _inputs(3)
    for d in policy.act(inputs):
        assert isinstance(d.action, Click)
        assert d.logprob == pytest.approx(np.log(1 / 16), abs=1e-5)  # one type, 16 cells, uniform
        assert (d.action.x * 4) % 1 == pytest.approx(0.5) and (d.action.y * 4) % 1 == pytest.approx(0.5)
    assert policy._cell_of(Click(x=0.99, y=0.0)) == 3 and policy._cell_of(Click(x=0.0, y=1.0)) == 12
    assert not policy.can_represent(Wait()) and not policy.can_represent(None)
    with pytest.raises(ValueError):
        policy.evaluate(torch.zeros(1, 1, 32, 32, dtype=torch.uint8), ["x"], [Wait()])


def test_crop_maps_cells_inside_the_crop():
    policy = build_policy("pixel", "p", {"grid": 2, "crop": [0.0, 0.0, 0.5, 0.5]})
    _, inputs = _inputs(4)
    for d in policy.act(inputs):
        assert d.action.x in (0.125, 0.375) and d.action.y in (0.125, 0.375)


def test_default_input_is_the_miniwob_area_below_the_instruction_bar_pixel_for_pixel():
    policy = build_policy("pixel", "p", {})
    image = np.zeros((210, 160, 3), dtype=np.uint8)
    image[50:, :, :] = 200  # the 160 x 160 area under MiniWoB's 50 px bar
    x = policy.preprocess(image)
    # the screenshot plane, then the (empty) history planes
    assert x.shape == (1 + 3, 160, 160) and bool((x[0] == 200).all()) and not x[1:].any()
    assert policy._cell_centre(0)[1] == pytest.approx((50 + 4) / 210)  # first row of 8 px cells, at its centre


def test_registry_and_bad_config():
    with pytest.raises(UserError, match="unknown policy kind"):
        build_policy("nope", "p", {})
    with pytest.raises(ValueError, match="cannot emit"):
        build_policy("pixel", "p", {"action_types": ["drag"]})


def test_load_policy_version_verifies_sha(tmp_path):
    store = BlobStore(str(tmp_path / "blobs"))
    policy = build_policy("pixel", "p", {"grid": 8})
    _perturb(policy)
    policy.version = 3
    pv = make_version(policy, save_weights(policy, store), parent=2)
    loaded = load_policy_version(pv, store)
    assert loaded.version == 3
    for (k, a), (_, b) in zip(policy.state_dict().items(), loaded.state_dict().items()):
        assert torch.equal(a, b), k
    path = tmp_path / "blobs" / pv.sha256[:2] / pv.sha256
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(PolicyIntegrityError, match="tampered"):
        load_policy_version(pv, store)


def test_critic_only_update_keeps_the_acting_policy_fixed():
    from trainer.rl.config import TrainConfig
    from trainer.rl.update import EpisodeSample, collate, ppo_update

    policy = build_policy("pixel", "p", {"grid": 4, "channels": [4, 8, 8]})
    eps, inputs = _inputs(8, task="click-test")
    decisions = policy.act(inputs)
    samples = [EpisodeSample(f"e{k}", [policy.preprocess(i.image)], [i.instruction], [d.action], [d.logprob],
                             [float(k % 2)], 0) for k, (i, d) in enumerate(zip(inputs, decisions))]
    before = {k: v.clone() for k, v in policy.state_dict().items()}
    opt = torch.optim.Adam(policy.parameters(), lr=1e-2)
    cfg = TrainConfig(epochs=2, minibatch_size=4)
    m = ppo_update(policy, opt, collate(samples), cfg, critic_only=True)
    after = policy.state_dict()
    moved = {k for k in before if not torch.equal(before[k], after[k])}
    assert moved and all(k.startswith("value_head") for k in moved), moved
    assert m["train/critic_only"] == 1.0
    m = ppo_update(policy, opt, collate(samples), cfg)  # then PPO moves the actor too
    assert any(not torch.equal(before[k], policy.state_dict()[k]) for k in before if k.startswith("loc_head"))
