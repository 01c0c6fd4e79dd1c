"""PPO core vs values computed by hand (the arithmetic is in the comments)."""

import math

import pytest
import torch

from trainer.rl import ppo


def test_gae_padded_batch_by_hand():
    rewards = torch.tensor([[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]])
    values = torch.tensor([[0.5, 0.6, 0.7], [0.2, 9.0, 9.0]])  # 9.0 sits on padding: must not leak
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    adv, ret = ppo.compute_gae(rewards, values, mask, gamma=0.9, lam=0.8)
    # t=2: 1 - 0.7 = 0.3 ; t=1: 0.9*0.7 - 0.6 = 0.03, + 0.72*0.3 = 0.246
    # t=0: 0.9*0.6 - 0.5 = 0.04, + 0.72*0.246 = 0.21712 ; second: 1 - 0.2 = 0.8, padding 0
    torch.testing.assert_close(adv, torch.tensor([[0.21712, 0.246, 0.3], [0.8, 0.0, 0.0]]))
    torch.testing.assert_close(ret, torch.tensor([[0.71712, 0.846, 1.0], [1.0, 0.0, 0.0]]))


def test_gae_lambda_one_gives_discounted_returns_and_per_trajectory_lambda():
    rewards = torch.tensor([[0.0, 0.0, 1.0]])
    values = torch.tensor([[0.5, 0.6, 0.7]])
    mask = torch.ones(1, 3)
    _, ret = ppo.compute_gae(rewards, values, mask, gamma=0.5, lam=1.0)
    torch.testing.assert_close(ret, torch.tensor([[0.25, 0.5, 1.0]]))  # Monte-Carlo returns
    adv0, _ = ppo.compute_gae(rewards, values, mask, gamma=0.9, lam=torch.tensor([0.0]))
    # lambda 0: one-step TD errors 0.04, 0.03, 0.3
    torch.testing.assert_close(adv0, torch.tensor([[0.04, 0.03, 0.3]]))


def test_length_adaptive_lambda():
    lam = ppo.length_adaptive_lam(torch.tensor([1, 2, 4]), alpha=1.0)
    torch.testing.assert_close(lam, torch.tensor([0.0, 0.5, 0.75]))  # 1-1/1, 1-1/2, 1-1/4
    lam = ppo.length_adaptive_lam(torch.tensor([1, 10]), alpha=0.5)
    torch.testing.assert_close(lam, torch.tensor([0.0, 0.8]))  # 1-1/0.5 = -1 clamps to 0; 1-1/5
    with pytest.raises(ValueError):
        ppo.length_adaptive_lam(torch.tensor([1]), alpha=0.0)


def test_decoupled_gae_uses_each_lambda():
    rewards = torch.tensor([[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]])
    values = torch.tensor([[0.5, 0.6, 0.7], [0.2, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    adv, ret = ppo.decoupled_gae(rewards, values, mask, gamma=1.0, lam_critic=1.0, alpha=1.0)
    # critic (lambda 1, gamma 1): returns are the final reward everywhere
    torch.testing.assert_close(ret, torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]]))
    # actor: length 3 -> lam 2/3 ; deltas 0.1, 0.1, 0.3 ; A2=0.3, A1=0.1+0.2=0.3, A0=0.1+0.2=0.3
    torch.testing.assert_close(adv, torch.tensor([[0.3, 0.3, 0.3], [0.8, 0.0, 0.0]]))
    adv_fixed, _ = ppo.decoupled_gae(rewards, values, mask, gamma=1.0, lam_critic=1.0, lam_policy=0.0)
    torch.testing.assert_close(adv_fixed, torch.tensor([[0.1, 0.1, 0.3], [0.8, 0.0, 0.0]]))


def test_ppo_policy_loss_clip_higher_by_hand():
    logprob = torch.log(torch.tensor([0.5, 0.5, 0.5]))
    old = torch.log(torch.tensor([0.25, 0.5, 1.0]))  # ratios 2, 1, 0.5
    adv = torch.tensor([1.0, 1.0, -1.0])
    loss, stats = ppo.ppo_policy_loss(logprob, old, adv, eps_low=0.2, eps_high=0.28)
    # -min(2, 1.28) = -1.28 ; -1 ; -min(-0.5, -0.8) = 0.8 -> mean -1.48/3
    assert loss.item() == pytest.approx(-1.48 / 3, abs=1e-6)
    assert stats["clip_frac"].item() == pytest.approx(2 / 3)
    # truncated IS against the behaviour policy: weights exp(old - beh) = 2, 1, 1 -> capped 1.5
    beh = torch.log(torch.tensor([0.125, 0.5, 1.0]))
    loss_tis, _ = ppo.ppo_policy_loss(logprob, old, adv, 0.2, 0.28, behaviour_logprob=beh, tis_cap=1.5)
    assert loss_tis.item() == pytest.approx((-1.28 * 1.5 - 1 + 0.8) / 3, abs=1e-6)
    # the mask removes the third step: (-1.28 - 1) / 2
    loss_m, _ = ppo.ppo_policy_loss(logprob, old, adv, 0.2, 0.28, mask=torch.tensor([1, 1, 0]))
    assert loss_m.item() == pytest.approx(-1.14, abs=1e-6)


def test_ppo_policy_loss_gradient_flows_only_inside_clip():
    logprob = torch.log(torch.tensor([0.5, 0.5])).requires_grad_()
    old = torch.log(torch.tensor([0.25, 0.5]))  # ratio 2 (clipped, A>0) and 1 (inside)
    loss, _ = ppo.ppo_policy_loss(logprob, old, torch.tensor([1.0, 1.0]), 0.2, 0.28)
    loss.backward()
    assert logprob.grad[0].item() == 0.0
    assert logprob.grad[1].item() == pytest.approx(-0.5)  # d(-ratio/2)/dlogprob at ratio 1


def test_value_loss_entropy_kl_by_hand():
    v, r = torch.tensor([1.0, 2.0]), torch.tensor([0.0, 0.0])
    assert ppo.value_loss(v, r).item() == pytest.approx(1.25)  # 0.5 * (1 + 4) / 2
    # clipped around old [0.5, 2.5] by 0.2 -> [0.7, 2.3]: max(1, .49)=1, max(4, 5.29)=5.29
    clipped = ppo.value_loss(v, r, old_values=torch.tensor([0.5, 2.5]), clip=0.2)
    assert clipped.item() == pytest.approx(0.5 * (1 + 5.29) / 2)
    assert ppo.entropy_bonus(torch.tensor([1.0, 3.0, 100.0]), torch.tensor([1, 1, 0])).item() == 2.0
    kl = ppo.kl_penalty(torch.log(torch.tensor([0.5])), torch.log(torch.tensor([0.25])))
    assert kl.item() == pytest.approx(0.5 + math.log(2) - 1, abs=1e-6)  # exp(d) - d - 1, d = -ln 2
    assert ppo.kl_penalty(torch.zeros(3), torch.zeros(3)).item() == 0.0


def test_metrics_by_hand():
    assert ppo.explained_variance(torch.tensor([1.0, 2.0, 2.0]), torch.tensor([1.0, 2.0, 3.0])) == pytest.approx(2 / 3)
    assert math.isnan(ppo.explained_variance(torch.zeros(3), torch.ones(3)))
    assert ppo.correlation(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([2.0, 4.0, 6.0])) == pytest.approx(1.0)
    assert ppo.correlation(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([3.0, 2.0, 1.0])) == pytest.approx(-1.0)
    ratio = torch.tensor([0.7, 0.9, 1.0, 1.3])
    assert ppo.clip_fraction(ratio, 0.2, 0.28).item() == 0.5
    w = ppo.masked_whiten(torch.tensor([1.0, 3.0, 50.0]), torch.tensor([1, 1, 0]))
    torch.testing.assert_close(w, torch.tensor([-1.0, 1.0, 0.0]), atol=1e-4, rtol=0)


def test_value_pretrain_criterion():
    crit = ppo.ValuePretrainCriterion(min_explained_variance=0.8, rel_tol=0.05, patience=2, max_batches=10)
    assert not ppo.value_pretrain_done([], [], crit)
    assert not ppo.value_pretrain_done([1.0, 0.5], [0.1, 0.3], crit)
    assert ppo.value_pretrain_done([1.0, 0.5], [0.1, 0.85], crit)  # explains the returns
    assert ppo.value_pretrain_done([1.0, 0.50, 0.49, 0.48], [0.1] * 4, crit)  # loss flat 2 batches
    assert not ppo.value_pretrain_done([1.0, 0.50, 0.49, 0.30], [0.1] * 4, crit)
    assert ppo.value_pretrain_done([1.0, 0.5] * 5, [0.0] * 10, crit)  # the cap
    assert ppo.value_pretrain_done([], [], ppo.ValuePretrainCriterion(max_batches=0))  # disabled
    timed = ppo.ValuePretrainCriterion(min_explained_variance=0.8, rel_tol=0.05, patience=2, max_batches=10, max_seconds=60)
    assert not ppo.value_pretrain_done([1.0, 0.5], [0.1, 0.3], timed, elapsed_s=59.0)
    assert ppo.value_pretrain_done([1.0, 0.5], [0.1, 0.3], timed, elapsed_s=60.0)  # long episodes: the time bound
    assert not ppo.value_pretrain_done([], [], timed, elapsed_s=600.0)  # at least one critic-only batch first
    assert not ppo.value_pretrain_done([1.0, 0.5], [0.1, 0.3], crit, elapsed_s=1e6)  # 0: no time bound


def test_far_off_policy_steps_give_finite_losses_and_gradients():
    """Acting weights far from the trained ones (log-ratio 270 nats) once made exp overflow to inf
    and inf * 0 (the truncated IS weight) NaN every weight: the log-ratio is clamped now."""
    logprob = torch.tensor([-5.0, -1.0, -0.5], requires_grad=True)
    proximal = torch.tensor([-275.0, -1.0, -0.4])
    behaviour = torch.tensor([-5.99, -300.0, -0.5])
    loss, stats = ppo.ppo_policy_loss(logprob, proximal, torch.tensor([1.0, -1.0, 0.5]), 0.2, 0.28,
                                      behaviour_logprob=behaviour, tis_cap=2.0)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(logprob.grad).all() and torch.isfinite(stats["ratio"]).all()
    assert torch.isfinite(ppo.kl_penalty(logprob.detach(), behaviour))


def test_a_non_finite_gradient_takes_no_step_and_spoils_no_metric():
    from tests.unit.ppo_samples import tiny_policy_and_samples
    from trainer.core import metric_names as M
    from trainer.rl.config import TrainConfig
    from trainer.rl.update import collate, ppo_update

    policy, samples = tiny_policy_and_samples([float("nan"), 1.0, 1.0, 1.0])
    before = {k: v.clone() for k, v in policy.state_dict().items()}
    m = ppo_update(policy, torch.optim.Adam(policy.parameters()), collate(samples), TrainConfig(epochs=2, minibatch_size=4))
    assert m[M.NONFINITE_SKIPPED] == 2  # both minibatches saw the NaN return
    assert all(torch.equal(before[k], v) for k, v in policy.state_dict().items())
    assert m[M.PG_LOSS] == 0.0 and m[M.VALUE_LOSS] == 0.0  # no NaN averaged in


def test_approx_kl_estimates_kl_from_the_old_policy_to_the_new_on_the_old_ones_samples():
    old = torch.distributions.Categorical(logits=torch.tensor([2.0, 0.0, -1.0, 0.5]))
    new = torch.distributions.Categorical(logits=torch.tensor([0.0, 1.0, -3.0, 0.5]))
    torch.manual_seed(0)
    a = old.sample((200_000,))
    exact = float(torch.distributions.kl_divergence(old, new))  # about 0.90
    got = float(ppo.approx_kl(new.log_prob(a), old.log_prob(a)))
    assert got == pytest.approx(exact, rel=0.03)
    # kl_penalty's direction (samples from the new policy, as the KL penalty has them) is off here
    assert abs(float(ppo.kl_penalty(new.log_prob(a), old.log_prob(a))) - exact) > 0.2
    # an update that all but drops a sampled action (log-ratio -14) reads about 13, not e^14
    assert float(ppo.approx_kl(torch.tensor([-16.0]), torch.tensor([-2.0]))) == pytest.approx(13.0, abs=1e-3)


def test_target_kl_stops_the_epochs_once_the_policy_moved_that_far():
    from tests.unit.ppo_samples import tiny_policy_and_samples
    from trainer.core import metric_names as M
    from trainer.rl.config import TrainConfig
    from trainer.rl.update import collate, ppo_update

    def epochs(target_kl: float) -> float:
        policy, samples = tiny_policy_and_samples([1.0, 0.0, 1.0, 0.0])
        cfg = TrainConfig(epochs=6, minibatch_size=4, lr=0.05, target_kl=target_kl).validate()
        return ppo_update(policy, torch.optim.Adam(policy.parameters(), lr=cfg.lr), collate(samples), cfg)[M.EPOCHS]

    # one minibatch an epoch, evaluated before it steps: epoch 1 reads KL 0, epoch 2 what step 1 moved
    assert epochs(1e-6) == 2
    assert epochs(0.0) == 6  # off
    assert epochs(1e6) == 6  # never reached
    for bad in (-0.1, float("nan")):
        with pytest.raises(Exception, match="target_kl"):
            TrainConfig(target_kl=bad).validate()


def test_target_kl_on_several_ranks_stops_on_every_ranks_share(monkeypatch):
    """Each rank holds its share of an epoch's KL; the stop must read their sum, or ranks that
    disagree about stopping wait forever in the next epoch's all-reduce."""
    from trainer.rl import update
    from trainer.rl.collectives import Rank
    from trainer.rl.config import TrainConfig

    cfg = TrainConfig(target_kl=0.01).validate()
    monkeypatch.setattr(update, "all_reduce_sums", lambda sums: {"kl": sums["kl"] + 0.02})  # the other rank's 0.02
    assert update._moved_enough(0.005, 1, cfg, False, None) is False  # one process: its own 0.005 < 1.5 x 0.01
    assert update._moved_enough(0.005, 1, cfg, False, Rank(0, 2)) is True  # 0.025 over both ranks
    assert update._moved_enough(0.005, 1, cfg, True, Rank(0, 2)) is False  # value pretraining never stops early

    # and the update itself asks the other ranks: one process standing in for rank 0 of a group
    # whose other rank moved far (its share 1e7), against a target this rank alone never reaches
    from tests.unit.ppo_samples import tiny_policy_and_samples
    from trainer.core import metric_names as M

    monkeypatch.setattr(update, "all_reduce_sums", lambda sums: {k: v + (1e7 if k == "kl" else 0.0) for k, v in sums.items()})
    monkeypatch.setattr(update, "all_reduce_grads", lambda params: None)
    monkeypatch.setattr(update, "gather_parts", lambda local, n, me: local)

    def epochs(me) -> float:
        policy, samples = tiny_policy_and_samples([1.0, 0.0, 1.0, 0.0])
        cfg = TrainConfig(epochs=6, minibatch_size=4, lr=0.05, target_kl=1e6).validate()
        opt = torch.optim.Adam(policy.parameters(), lr=cfg.lr)
        return update.ppo_update(policy, opt, update.collate(samples), cfg, me=me)[M.EPOCHS]

    assert epochs(None) == 6
    assert epochs(Rank(0, 1)) == 1


def test_an_update_reads_the_whole_batch_once_before_its_minibatches_decoupled_or_not():
    """GAE's values and the proximal policy's log-probs come from one pass over the batch (the
    weights do not move between them), so the steps scored without gradients are the batch's N
    once; then each of the epochs scores every step once with gradients."""
    from tests.unit.ppo_samples import tiny_policy_and_samples
    from trainer.rl.config import TrainConfig
    from trainer.rl.update import collate, ppo_update

    for tis_cap in (2.0, 0.0):
        policy, samples = tiny_policy_and_samples([1.0, 0.0, 1.0, 0.0, 1.0])
        seen = {"no_grad": 0, "grad": 0}
        evaluate = policy.evaluate

        def counting(obs, instructions, actions, evaluate=evaluate, seen=seen):
            seen["grad" if torch.is_grad_enabled() else "no_grad"] += len(actions)
            return evaluate(obs, instructions, actions)

        policy.evaluate = counting
        cfg = TrainConfig(epochs=3, minibatch_size=2, lr=0.01, tis_cap=tis_cap).validate()
        batch = collate(samples)
        ppo_update(policy, torch.optim.Adam(policy.parameters(), lr=cfg.lr), batch, cfg)
        assert seen == {"no_grad": len(batch.actions), "grad": 3 * len(batch.actions)}, tis_cap
