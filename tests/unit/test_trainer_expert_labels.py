"""DAgger's term (``expert_coef``): the trainer imitates the expert's labels on the policy's own
states beside PPO's loss; unlabelled steps and a coefficient of 0 leave the update as it was."""

import copy

import pytest
import torch

from infra.runtime.config import ConfigError
from schemas.actions import Click
from tests.unit.ppo_samples import tiny_policy_and_samples
from trainer.core import metric_names as M
from trainer.rl.config import TrainConfig
from trainer.rl.update import _evaluate_all, collate, ppo_update

EXPERT = Click(x=0.9, y=0.9)  # one corner cell of the 4 x 4 grid: no sample's own action there


def _labelled(samples, every: bool):
    for k, s in enumerate(samples):
        s.experts = [EXPERT if every or k % 2 == 0 else None]
    return samples


def _expert_logprob(policy, batch) -> float:
    probe = copy.copy(batch)
    probe.actions = [EXPERT] * len(batch.actions)
    return float(_evaluate_all(policy, probe)[0].mean())


def _update(policy, batch, expert_coef: float):
    policy = copy.deepcopy(policy)
    cfg = TrainConfig(expert_coef=expert_coef, tis_cap=0.0, ent_coef=0.0, epochs=8, minibatch_size=4, lr=1e-2)
    torch.manual_seed(1)
    metrics = ppo_update(policy, torch.optim.Adam(policy.parameters(), lr=cfg.lr), batch, cfg)
    return _expert_logprob(policy, batch), metrics


def test_expert_coef_pulls_the_policy_towards_the_labels_and_reports_their_nll():
    policy, samples = tiny_policy_and_samples([1.0, 1.0, 1.0, 1.0, 1.0, 1.0])  # equal returns: PPO pulls nowhere
    batch = collate(_labelled(samples, every=False))
    assert [a is not None for a in batch.expert_actions] == [True, False] * 3
    before = _expert_logprob(policy, batch)
    free, free_metrics = _update(policy, batch, 0.0)
    taught, taught_metrics = _update(policy, batch, 1.0)
    assert abs(free - before) < 0.05
    assert taught > before + 0.5
    assert M.EXPERT_LOSS not in free_metrics
    assert 0 < taught_metrics[M.EXPERT_LOSS] < -before  # the mean NLL fell from -before during the update


def test_a_batch_without_labels_updates_as_without_the_term():
    policy, samples = tiny_policy_and_samples([1.0, 0.0, 1.0, 0.0])
    batch = collate(samples)
    assert batch.expert_actions == [None] * 4
    a, ma = _update(policy, batch, 0.0)
    b, mb = _update(policy, batch, 1.0)
    assert a == pytest.approx(b) and ma[M.PG_LOSS] == pytest.approx(mb[M.PG_LOSS])
    assert M.EXPERT_LOSS not in mb  # no step had a label: no loss to report (0.0 would read as perfect)


def test_a_negative_or_nan_expert_coef_is_refused_and_so_is_a_policy_that_scores_only_its_samples():
    for bad in (-0.1, float("nan")):
        with pytest.raises(ConfigError, match="expert_coef"):
            TrainConfig(expert_coef=bad).validate()
    with pytest.raises(ConfigError, match="scores only its own samples"):
        TrainConfig(policy_kind="lm", expert_coef=0.5).validate()
    assert TrainConfig(policy_kind="lm").validate().expert_coef == 0.0
