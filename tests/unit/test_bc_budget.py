"""`flywheel bc`'s training budget (BCConfig.train_budget_s): no epoch starts once training has
taken that long, the first always runs; 0 runs every epoch. The demo sets it so SFT ends within
its share of --minutes whatever an epoch costs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from infra.runtime.config import ConfigError
from infra.runtime.policy import build_policy
from schemas.actions import Click
from trainer.sft import bc
from trainer.sft.bc import Examples, bc_train
from trainer.sft.bc_config import BCConfig


def tiny_examples(policy, n: int = 8) -> Examples:
    screens = np.random.default_rng(0).integers(0, 255, (n, 210, 160, 3), dtype=np.uint8)
    obs = torch.stack([policy.preprocess(s) for s in screens])
    return Examples(obs, ["Click it."] * n, [Click(x=0.5, y=0.5)] * n, ["t"] * n)


def test_no_epoch_starts_past_the_budget_and_the_first_always_runs(monkeypatch):
    torch.manual_seed(0)
    policy = build_policy("pixel", "p", {"grid": 4, "channels": [4, 8, 8]})
    data = tiny_examples(policy)
    assert len(bc_train(policy, data, 5, 1e-3, 4)) == 5  # no budget: every epoch
    clock = iter(range(0, 1000, 10))  # every reading of the clock 10 s later than the last
    monkeypatch.setattr(bc.time, "monotonic", lambda: float(next(clock)))
    assert len(bc_train(policy, data, 5, 1e-3, 4, budget_s=25.0)) == 3  # epochs began at 10 s and 20 s: at 30 s none
    assert len(bc_train(policy, data, 5, 1e-3, 4, budget_s=1e-9)) == 1  # the first epoch always runs


def test_the_budget_is_validated():
    assert BCConfig(train_budget_s=30.0).validate().train_budget_s == 30.0
    for bad in (-1.0, float("nan")):
        with pytest.raises(ConfigError, match="train_budget_s"):
            BCConfig(train_budget_s=bad).validate()


def test_reading_and_preprocessing_the_demonstrations_comes_out_of_the_budget(monkeypatch):
    from trainer.sft.bc import train_budget

    assert train_budget(300.0, 120.0) == 180.0
    assert 0 < train_budget(300.0, 400.0) < 1e-6  # spent before training: the first epoch alone
    assert train_budget(0.0, 400.0) == 0.0  # no budget stays none
    policy = build_policy("pixel", "p", {"grid": 4, "channels": [4, 8, 8]})
    seen = {}
    clock = iter([0.0, 100.0])  # preprocessing took 100 s
    monkeypatch.setattr(bc.time, "monotonic", lambda: next(clock))
    monkeypatch.setattr(bc, "examples", lambda *a: tiny_examples(policy))
    monkeypatch.setattr(bc, "bc_train", lambda *a, budget_s, **k: seen.setdefault("budget", budget_s) and [1.0])
    bc.clone_steps(policy, [], None, BCConfig(train_budget_s=250.0))
    assert seen["budget"] == 150.0
