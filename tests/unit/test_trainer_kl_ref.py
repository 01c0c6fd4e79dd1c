"""The KL penalty is measured against a frozen reference policy (pi_sft), not the behaviour policy."""

import copy

import pytest
import torch

from tests.unit.ppo_samples import tiny_policy_and_samples
from trainer.core import metric_names as M
from trainer.rl import ppo
from trainer.rl.config import TrainConfig
from trainer.rl.update import _evaluate_all, collate, ppo_update, reference_logprobs


def _kl_to(policy, batch) -> float:
    return float(ppo.kl_penalty(_evaluate_all(policy, batch)[0], batch.ref_logprob))


def _update(policy, batch, kl_coef: float) -> tuple[float, dict[str, float]]:
    policy = copy.deepcopy(policy)
    cfg = TrainConfig(kl_coef=kl_coef, tis_cap=0.0, ent_coef=0.0, epochs=8, minibatch_size=4, lr=1e-2)
    optimizer = torch.optim.Adam(policy.parameters(), lr=cfg.lr)
    torch.manual_seed(1)
    metrics = ppo_update(policy, optimizer, batch, cfg)
    return _kl_to(policy, batch), metrics


def test_kl_coef_pulls_the_update_towards_the_reference():
    policy, samples = tiny_policy_and_samples([1.0, 1.0, 1.0, 1.0])  # equal returns: no advantage pulls the actor
    reference = copy.deepcopy(policy)  # its heads start at zero (uniform): move them away from the actor's
    torch.manual_seed(7)
    with torch.no_grad():
        for p in reference.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    batch = collate(samples)
    batch.ref_logprob = reference_logprobs(reference, batch)
    before = _kl_to(policy, batch)
    free, free_metrics = _update(policy, batch, kl_coef=0.0)
    anchored, anchored_metrics = _update(policy, batch, kl_coef=5.0)
    print("KL to the reference: before", before, "free", free, "anchored", anchored)  # 0.547 0.547 0.422
    assert before > 0.1
    assert abs(free - before) < 0.01 * before  # no advantage and no penalty: the actor stays
    assert anchored < 0.9 * before  # the penalty alone moves it towards the reference
    # the metric is the KL to the reference, reported whether or not it is penalised
    assert M.KL_REF in free_metrics and M.KL_REF in anchored_metrics
    assert anchored_metrics[M.KL_REF] < free_metrics[M.KL_REF]


def test_kl_coef_without_reference_logprobs_is_refused():
    policy, samples = tiny_policy_and_samples([1.0, 0.0])
    cfg = TrainConfig(kl_coef=0.1, tis_cap=0.0, epochs=1, minibatch_size=2)
    with pytest.raises(ValueError, match="reference"):
        ppo_update(policy, torch.optim.Adam(policy.parameters()), collate(samples), cfg)


def test_without_a_reference_no_kl_ref_metric():
    policy, samples = tiny_policy_and_samples([1.0, 0.0])
    metrics = ppo_update(policy, torch.optim.Adam(policy.parameters()), collate(samples),
                         TrainConfig(epochs=1, minibatch_size=2))
    assert M.KL_REF not in metrics and M.APPROX_KL in metrics


def test_a_reference_that_reads_other_inputs_is_refused_and_one_that_differs_only_in_seed_is_not():
    from infra.runtime.policy import build_policy
    from trainer.rl.kl_reference import reference_mismatch

    base = {"coord_mode": "1000", "max_images": 1, "max_new_tokens": 8}
    policy = build_policy("lm", "lm-t", {**base, "pointer": True})
    assert reference_mismatch(policy, build_policy("lm", "lm-t", {**base, "pointer": True, "seed": 7,
                                                                   "max_new_tokens": 32})) is None
    digits = build_policy("lm", "lm-t", {**base, "pointer": False})  # its vocabulary has no location tokens
    assert "pointer" in reference_mismatch(policy, digits)
    assert "is a pixel policy" in reference_mismatch(policy, build_policy("pixel", "px", {}))
