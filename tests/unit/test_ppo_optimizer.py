"""PPO's optimiser (trainer.rl.update.make_optimizer): one rate, or the parts a policy trains from
scratch at a multiple of it (``--head-lr-mult``)."""

from __future__ import annotations

import pytest

from infra.runtime.config import ConfigError
from infra.runtime.policy import build_policy
from trainer.rl.config import TrainConfig
from trainer.rl.update import make_optimizer


def test_the_language_policy_heads_get_their_multiple_and_the_lm_the_base_rate():
    policy = build_policy("lm", "lm-t", {"max_new_tokens": 4})
    opt = make_optimizer(policy, 1e-6, 100)
    lm, heads = opt.param_groups
    assert lm["lr"] == 1e-6 and heads["lr"] == pytest.approx(1e-4)
    ids = {id(p) for p in heads["params"]}
    assert all(id(p) in ids for p in policy.value_head.parameters())
    assert all(id(p) in ids for p in policy.vision.parameters())
    assert not any(id(p) in ids for p in policy.lm.parameters())
    together = sum(p.numel() for g in opt.param_groups for p in g["params"])
    assert together == sum(p.numel() for p in policy.parameters())  # every parameter, once


def test_one_rate_by_default_and_for_a_policy_without_fresh_parts():
    lm = build_policy("lm", "lm-t", {"max_new_tokens": 4})
    assert [g["lr"] for g in make_optimizer(lm, 1e-5).param_groups] == [1e-5]
    pixel = build_policy("pixel", "px", {})
    assert [g["lr"] for g in make_optimizer(pixel, 3e-4, 10).param_groups] == [3e-4]


def test_a_head_multiple_of_zero_is_refused():
    with pytest.raises(ConfigError, match="head_lr_mult"):
        TrainConfig(head_lr_mult=0).validate()
