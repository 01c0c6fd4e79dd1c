"""What the pixel policy's heads other than the pointers' can read beyond each channel's mean and
maximum, off unless asked (``--policy-config``): the spatial-softmax keypoints (``keypoints``:
where each channel peaks; on the games they helped the clone and cost PPO its updates,
docs/tasks.md) and a hidden layer over the pooled features (``head_hidden``)."""

import numpy as np
import torch

from infra.runtime.policy import PolicyInput, build_policy, policy_kind
from producers.suites import hotkeys, plan
from trainer.policies.pixel.config import pixel_config
from trainer.policies.pixel.model import MULTI_STEP_ACTIONS


def test_a_keypoint_is_where_its_channel_peaks():
    policy = build_policy("pixel", "p", {"grid": 5, "keypoints": True})
    h = torch.zeros(2, 3, 5, 5)
    h[0, 0, 1, 4] = 50.0  # channel 0 of the first input peaks at row 1, column 4
    h[1, 2, 3, 0] = 50.0
    x, y = policy._keypoints(h)
    ramp = torch.linspace(-1.0, 1.0, 5)
    assert x.shape == y.shape == (2, 3)
    torch.testing.assert_close(torch.stack([x[0, 0], y[0, 0]]), torch.stack([ramp[4], ramp[1]]))
    torch.testing.assert_close(torch.stack([x[1, 2], y[1, 2]]), torch.stack([ramp[0], ramp[3]]))
    assert abs(float(x[0, 1])) < 1e-6 and abs(float(y[1, 0])) < 1e-6  # a flat channel sits at the centre


def test_a_games_policy_asked_for_keypoints_reads_them_and_acts_as_it_evaluates():
    config = policy_kind("pixel").task_config(plan(["games"]).action_types, {}, keys=hotkeys())
    assert "keypoints" not in config and "keypoints" not in pixel_config(plan(["default"]).action_types)
    config = pixel_config(plan(["games"]).action_types, {"keypoints": True}, hotkeys())
    policy = build_policy("pixel", "p", {**config, "seed": 3})
    plain = build_policy("pixel", "p", {**config, "keypoints": False})
    c3 = policy.cfg["channels"][-1]
    assert policy.value_head[0].in_features == plain.value_head[0].in_features + 2 * c3
    assert policy.trunk[0].in_features == plain.trunk[0].in_features + 2 * c3
    assert_acts_as_it_evaluates(policy)


def test_a_hidden_head_layer_feeds_the_actor_heads_only_and_acts_as_it_evaluates():
    config = pixel_config(plan(["games"]).action_types, {"seed": 3}, hotkeys())
    assert config["head_hidden"] > 0 and "head_hidden" not in pixel_config(plan(["default"]).action_types)
    policy = build_policy("pixel", "p", {**config, "head_hidden": 48})
    plain = build_policy("pixel", "p", {**config, "head_hidden": 0})
    assert isinstance(plain.trunk, torch.nn.Identity)
    assert policy.key_head.in_features == policy.type_head.in_features == 48
    assert policy.value_head[0].in_features == plain.value_head[0].in_features  # the critic reads the pooled features
    assert not list(plain.trunk.parameters()) and len(list(policy.trunk.parameters())) == 2
    for name, weight in plain.convs.state_dict().items():  # the same features under both
        torch.testing.assert_close(policy.convs.state_dict()[name], weight, msg=name)
    image = policy.preprocess(np.zeros((210, 160, 3), dtype=np.uint8), [], "Steer the snake.")[None]
    with torch.no_grad():  # zeroed heads: uniform over types and keys, with the layer or without
        out, plain_out = policy(image, ["Steer the snake."]), plain(image, ["Steer the snake."])
    for head in ("type", "key"):
        assert torch.count_nonzero(out[head]) == 0 and torch.count_nonzero(plain_out[head]) == 0
    assert_acts_as_it_evaluates(policy)


def test_every_head_reading_the_hidden_layer_acts_as_it_evaluates():
    # a run mixing MiniWoB++ and the games: the typed span and the scroll direction read it too
    types = [*MULTI_STEP_ACTIONS, "hotkey"]
    policy = build_policy("pixel", "p", {**pixel_config(types), "head_hidden": 32, "seed": 5})
    assert policy.span_query.in_features == policy.direction_head.in_features == 32
    assert_acts_as_it_evaluates(policy, "Type \"hello world\" in the box, then scroll down.")


def assert_acts_as_it_evaluates(policy, instruction: str = "Steer the snake.") -> None:
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(0.3 * torch.randn_like(p, generator=torch.Generator().manual_seed(p.numel())))
    rng = np.random.default_rng(0)
    inputs = [PolicyInput(rng.integers(0, 255, (210, 160, 3), dtype=np.uint8), instruction, 160, 210) for _ in range(12)]
    decisions = policy.act(inputs)
    images = torch.stack([policy.preprocess(i.image, [], i.instruction) for i in inputs])
    logprob, value, _ = policy.evaluate(images, [i.instruction for i in inputs], [d.action for d in decisions])
    torch.testing.assert_close(logprob, torch.tensor([d.logprob for d in decisions]), atol=1e-5, rtol=0)
    torch.testing.assert_close(value, torch.tensor([d.value for d in decisions]), atol=1e-5, rtol=0)
