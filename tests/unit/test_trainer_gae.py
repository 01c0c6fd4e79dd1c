"""GAE on multi-step episodes: decoupled (lam_critic = 1, length-adaptive lam_policy) differs
from coupled GAE (lam_policy = lam_critic = 0.95); a truncated episode bootstraps from V(s_T)."""

import pytest
import torch

from trainer.rl import ppo

REWARDS = torch.tensor([[0.0, 0.0, 1.0]])
VALUES = torch.tensor([[0.2, 0.5, 0.8]])
MASK = torch.ones(1, 3)


def test_decoupled_and_coupled_gae_give_different_advantages_on_a_multi_step_episode():
    coupled_adv, coupled_ret = ppo.decoupled_gae(REWARDS, VALUES, MASK, 1.0, lam_critic=0.95, lam_policy=0.95)
    adv, ret = ppo.decoupled_gae(REWARDS, VALUES, MASK, 1.0, lam_critic=1.0, alpha=1.0)
    # deltas: 0.3, 0.3, 0.2; coupled lambda 0.95, decoupled lam_policy = 1 - 1/(1 * 3) = 2/3
    torch.testing.assert_close(coupled_adv, torch.tensor([[0.3 + 0.95 * 0.49, 0.49, 0.2]]))
    torch.testing.assert_close(adv, torch.tensor([[0.3 + 2 / 3 * (0.3 + 2 / 3 * 0.2), 0.3 + 2 / 3 * 0.2, 0.2]]))
    assert (adv[0, :2] - coupled_adv[0, :2]).abs().min() > 0.05
    # the critic's targets: the full return with lambda = 1, a biased blend with 0.95
    torch.testing.assert_close(ret, torch.ones(1, 3))
    assert not torch.allclose(coupled_ret, ret)


def test_one_step_episodes_make_the_multi_turn_machinery_inert():
    # the point: with l = 1, lam_policy = 0 and the advantage is r - V whatever lambda
    r, v, m = torch.tensor([[1.0]]), torch.tensor([[0.3]]), torch.ones(1, 1)
    a1, _ = ppo.decoupled_gae(r, v, m, 1.0, lam_critic=1.0, alpha=1.0)
    a2, _ = ppo.decoupled_gae(r, v, m, 1.0, lam_critic=0.95, lam_policy=0.95)
    torch.testing.assert_close(a1, a2)


def test_truncation_bootstraps_from_the_value_after_the_last_step():
    rewards = torch.zeros(2, 3)
    values = VALUES.expand(2, 3)
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    boot = torch.tensor([0.6, 0.4])  # episode 0 hit the step budget at 3 steps, episode 1 at 2
    adv, ret = ppo.compute_gae(rewards, values, mask, 1.0, 1.0, bootstrap=boot)
    torch.testing.assert_close(ret, torch.tensor([[0.6, 0.6, 0.6], [0.4, 0.4, 0.0]]))
    assert adv[0, 2] == pytest.approx(0.6 - 0.8) and adv[1, 1] == pytest.approx(0.4 - 0.5)
    # the same episodes ended in a terminal state: nothing after them
    _, ret0 = ppo.compute_gae(rewards, values, mask, 1.0, 1.0)
    torch.testing.assert_close(ret0, torch.zeros(2, 3))
    # discounting reaches the bootstrap too
    _, ret_g = ppo.compute_gae(rewards[:1], values[:1], mask[:1], 0.5, 1.0, bootstrap=boot[:1])
    torch.testing.assert_close(ret_g, torch.tensor([[0.6 / 8, 0.6 / 4, 0.6 / 2]]))


def test_ppo_update_bootstraps_truncated_episodes_from_the_policy_value_of_s_T():
    import numpy as np

    from infra.runtime.policy import build_policy
    from schemas.actions import Click
    from trainer.rl.config import TrainConfig
    from trainer.rl.update import EpisodeSample, bootstrap_values, collate, ppo_update

    policy = build_policy("pixel", "p", {"grid": 4, "channels": [4, 8, 8]})
    with torch.no_grad():
        for p in policy.value_head.parameters():
            p.add_(0.5 * torch.randn_like(p))
    rng = np.random.default_rng(0)
    frames = [policy.preprocess(rng.integers(0, 255, (210, 160, 3), dtype=np.uint8)) for _ in range(3)]

    def episode(eid, truncated, boot):
        return EpisodeSample(eid, frames[:2], ["Click it."] * 2, [Click(x=0.5, y=0.5)] * 2, [-2.0, -2.0],
                             [0.0, 0.0], 0, truncated=truncated, bootstrap_input=boot)

    batch = collate([episode("done", False, None), episode("cut", True, frames[2]), episode("cut-no-frame", True, None)])
    values = policy.values(torch.stack(frames), ["Click it."] * 3).detach()
    values_bt = torch.stack([values[:2]] * 3)
    boot = bootstrap_values(policy, batch, values_bt)
    torch.testing.assert_close(boot, torch.stack([torch.tensor(0.0), values[2], values[1]]))
    for lam_policy in (-1.0, 0.95):  # decoupled length-adaptive, and coupled
        m = ppo_update(policy, torch.optim.Adam(policy.parameters(), lr=1e-3), batch,
                       TrainConfig(epochs=1, minibatch_size=4, lam_policy=lam_policy))
        assert np.isfinite(m["losses/value_loss"])
