"""Chunked GAE (trainer.rl.chunks): a long episode cut into chunks, each bootstrapping from the
critic at its cut, gets the whole episode's advantages and returns, for coupled, decoupled and
length-adaptive GAE; the trainer's batches are built that way (collate with chunk_steps)."""

import pytest
import torch

from trainer.rl import chunks, ppo
from trainer.rl.update import EpisodeSample, collate

GAMMA = 0.99


def synthetic(lengths: list[int], seed: int = 0) -> tuple[list[torch.Tensor], list[torch.Tensor], torch.Tensor]:
    """Per episode random rewards and values (float64), and a bootstrap per episode."""
    g = torch.Generator().manual_seed(seed)
    rewards = [torch.randn(n, generator=g, dtype=torch.float64) for n in lengths]
    values = [torch.randn(n, generator=g, dtype=torch.float64) for n in lengths]
    return rewards, values, torch.randn(len(lengths), generator=g, dtype=torch.float64)


def padded(rows: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    T = max(len(r) for r in rows)
    out, mask = torch.zeros(len(rows), T, dtype=torch.float64), torch.zeros(len(rows), T, dtype=torch.float64)
    for b, r in enumerate(rows):
        out[b, :len(r)], mask[b, :len(r)] = r, 1.0
    return out, mask


def as_chunks(rewards, values, bootstrap, chunk_steps):
    """Rows of at most chunk_steps steps, as the trainer lays them out; -> tensors + where each row came from."""
    r_rows, v_rows, nxt, length, boot, where = [], [], [], [], [], []
    for e, (r, v) in enumerate(zip(rewards, values)):
        spans = chunks.chunk_spans(len(r), chunk_steps)
        for i, (s, t) in enumerate(spans):
            r_rows.append(r[s:t]), v_rows.append(v[s:t]), where.append((e, s, t))
            nxt.append(len(r_rows) if i + 1 < len(spans) else -1)
            length.append(len(r)), boot.append(bootstrap[e])
    R, mask = padded(r_rows)
    V, _ = padded(v_rows)
    return R, V, mask, torch.tensor(nxt), torch.tensor(length), torch.stack(boot), where


def unchunk(x: torch.Tensor, where, lengths) -> torch.Tensor:
    out = torch.zeros(len(lengths), max(lengths), dtype=x.dtype)
    for b, (e, s, t) in enumerate(where):
        out[e, s:t] = x[b, :t - s]
    return out


@pytest.mark.parametrize("lam_policy, lam_critic", [(None, 1.0), (None, 0.95), (0.9, 0.9), (0.95, 1.0)])
def test_chunked_gae_equals_the_whole_episodes(lam_policy, lam_critic):
    lengths = [500, 7, 129, 128, 1]
    rewards, values, bootstrap = synthetic(lengths)
    R, mask = padded(rewards)
    V, _ = padded(values)
    whole_adv, whole_ret = ppo.decoupled_gae(R, V, mask, GAMMA, lam_critic, alpha=0.05, lam_policy=lam_policy,
                                             bootstrap=bootstrap)
    CR, CV, cmask, nxt, length, boot, where = as_chunks(rewards, values, bootstrap, 128)
    assert CR.shape[1] == 128 and len(where) == 4 + 1 + 2 + 1 + 1
    adv, ret = chunks.chunked_decoupled_gae(CR, CV, cmask, GAMMA, lam_critic, nxt, length, boot, alpha=0.05,
                                            lam_policy=lam_policy)
    torch.testing.assert_close(unchunk(adv, where, lengths), whole_adv, rtol=0, atol=1e-10)
    torch.testing.assert_close(unchunk(ret, where, lengths), whole_ret, rtol=0, atol=1e-10)
    assert (adv * (1 - cmask)).abs().sum() == 0 and (ret * (1 - cmask)).abs().sum() == 0


def test_length_adaptive_lambda_reads_the_whole_episode_length_not_the_chunks():
    rewards, values, bootstrap = synthetic([300])
    CR, CV, cmask, nxt, length, boot, where = as_chunks(rewards, values, bootstrap, 100)
    whole, _ = ppo.decoupled_gae(*[padded(x)[0] for x in (rewards, values)], torch.ones(1, 300, dtype=torch.float64),
                                 GAMMA, 1.0, alpha=0.05, bootstrap=bootstrap)
    adv, _ = chunks.chunked_decoupled_gae(CR, CV, cmask, GAMMA, 1.0, nxt, length, boot, alpha=0.05)
    torch.testing.assert_close(unchunk(adv, where, [300]), whole, rtol=0, atol=1e-10)
    # lambda from each chunk's own length (100 steps: 0.8 instead of 300's 0.933) is another estimate
    wrong, _ = chunks.chunked_decoupled_gae(CR, CV, cmask, GAMMA, 1.0, nxt, cmask.sum(1), boot, alpha=0.05)
    assert (unchunk(wrong, where, [300]) - whole).abs().max() > 1e-2


def test_the_carried_advantage_is_what_makes_the_cut_exact():
    # a bootstrap of the critic's value alone (truncated GAE) is biased wherever lambda > 0
    rewards, values, bootstrap = synthetic([256])
    CR, CV, cmask, nxt, length, boot, where = as_chunks(rewards, values, bootstrap, 128)
    whole, _ = ppo.compute_gae(*[padded(x)[0] for x in (rewards, values)], torch.ones(1, 256, dtype=torch.float64),
                               GAMMA, 0.95, bootstrap=bootstrap)
    value_only = torch.stack([CV[1, 0], boot[1]])
    truncated, _ = ppo.compute_gae(CR, CV, cmask, GAMMA, 0.95, bootstrap=value_only)
    assert (unchunk(truncated, where, [256]) - whole).abs().max() > 1e-3
    carried, _ = chunks.chunked_gae(CR, CV, cmask, GAMMA, torch.full((2,), 0.95, dtype=torch.float64), nxt, boot)
    torch.testing.assert_close(unchunk(carried, where, [256]), whole, rtol=0, atol=1e-10)


def test_chunk_spans_and_bad_layouts():
    assert chunks.chunk_spans(5, 2) == [(0, 2), (2, 4), (4, 5)]
    assert chunks.chunk_spans(5, 0) == [(0, 5)] and chunks.chunk_spans(4, 4) == [(0, 4)]
    with pytest.raises(ValueError):
        chunks.chunk_spans(0, 4)
    with pytest.raises(ValueError, match="later row"):
        chunks.chunks_from_end(torch.tensor([1, 0]))


def sample(episode_id: str, n: int, truncated: bool = False) -> EpisodeSample:
    return EpisodeSample(episode_id=episode_id, images=[torch.full((1, 2, 2), i % 256, dtype=torch.uint8) for i in range(n)],
                         instructions=["i"] * n, actions=list(range(n)), logprobs=[-0.1] * n,
                         rewards=[float(i) for i in range(n)], policy_version=0, truncated=truncated,
                         bootstrap_input="s_T" if truncated else None)


def test_collate_cuts_long_episodes_into_rows_of_at_most_chunk_steps():
    batch = collate([sample("long", 300, truncated=True), sample("short", 3)], chunk_steps=128)
    assert batch.mask.shape == (4, 128)
    assert batch.mask.sum(1).tolist() == [128, 128, 44, 3]
    assert batch.next_row.tolist() == [1, 2, -1, -1]
    assert batch.episode_length.tolist() == [300, 300, 300, 3]
    assert batch.truncated.tolist() == [False, False, True, False]  # only the last chunk ends the episode
    assert batch.bootstrap_inputs == [None, None, "s_T", None]
    # the flattened steps stay in episode order, the per-episode figures count episodes
    assert batch.actions == list(range(300)) + list(range(3))
    torch.testing.assert_close(batch.rewards[batch.mask.bool()], torch.tensor([float(i) for i in range(300)] + [0.0, 1.0, 2.0]))
    assert batch.episode_return.tolist() == [sum(range(300)), 3.0]
    assert batch.episode_ids == ["long", "short"]
    whole = collate([sample("long", 300, truncated=True), sample("short", 3)])
    assert whole.mask.shape == (2, 300) and whole.next_row.tolist() == [-1, -1]


class GradientRecorder(torch.optim.SGD):
    """SGD that keeps the gradient of every step it takes (after PPO's clipping), flattened."""

    def __init__(self, params, lr: float):
        self.params = list(params)
        super().__init__(self.params, lr=lr)
        self.gradients: list[torch.Tensor] = []

    def step(self, closure=None):
        self.gradients.append(torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).flatten()
                                         for p in self.params]).double())
        return super().step(closure)


def test_a_ppo_update_on_chunks_is_the_update_on_whole_episodes():
    """The equivalence is of the loss and its gradient: both compared in float64 against the
    gradient's own scale. (Weights after an Adam step were compared before: Adam divides by the
    root of the squared gradient, so a rounding-level difference on a near-zero gradient became
    a step-sized weight difference, and the pass hung on the CPU's float rounding.)"""
    import copy

    import numpy as np

    from infra.runtime.policy import build_policy
    from schemas.actions import Click
    from trainer.rl.config import TrainConfig
    from trainer.rl.update import ppo_update

    torch.manual_seed(0)
    policy = build_policy("pixel", "p", {"grid": 4, "channels": [4, 8, 8]})
    for p in policy.value_head.parameters():  # a critic that tells states apart (it starts at 0)
        torch.nn.init.normal_(p, std=0.5)
    screens = np.random.default_rng(0).integers(0, 255, (7, 210, 160, 3), dtype=np.uint8)
    frames = [policy.preprocess(screen) for screen in screens]

    def episode(eid, n, truncated, first=0):
        return EpisodeSample(eid, frames[first:first + n], ["Click it."] * n, [Click(x=0.5, y=0.5)] * n, [-2.0] * n,
                             [float(i % 3) for i in range(n)], 0, truncated=truncated,
                             bootstrap_input=frames[first + n] if truncated else None)

    episodes = [episode("long", 6, True), episode("short", 2, False, first=4)]
    cfg = TrainConfig(epochs=1, minibatch_size=16, lam_critic=0.9, alpha=0.5)  # one minibatch: one gradient
    results = []
    for chunk_steps in (0, 2):
        trained = copy.deepcopy(policy)
        optimizer = GradientRecorder(trained.parameters(), lr=1e-2)
        m = ppo_update(trained, optimizer, collate(episodes, chunk_steps), cfg, generator=torch.Generator().manual_seed(0))
        results.append((m, optimizer.gradients))
    (whole_m, whole_g), (chunk_m, chunk_g) = results
    assert len(whole_g) == len(chunk_g) == 1
    scale = whole_g[0].abs().max()
    assert scale > 1e-3  # it trained: a gradient to compare
    # float32 arithmetic in another order: differences at rounding level of the gradient's scale
    torch.testing.assert_close(chunk_g[0], whole_g[0], rtol=0, atol=1e-5 * float(scale))
    for key in ("losses/value_loss", "losses/pg_loss", "value/explained_variance", "value/reward_corr",
                "batch/episodes", "batch/episode_length", "batch/reward_mean"):
        assert chunk_m[key] == pytest.approx(whole_m[key], rel=1e-5, abs=1e-7), key
    assert chunk_m["batch/episodes"] == 2 and chunk_m["batch/episode_length"] == 4


def test_the_trainer_updates_once_its_pool_holds_max_batch_steps(monkeypatch, tmp_path):
    import threading
    from types import SimpleNamespace

    from infra.runtime.consume_loop import CheckpointFile
    from infra.runtime.settings import load_settings
    from trainer.rl.state import PPOState
    from trainer.rl import streaming_ppo as stream
    from trainer.rl.config import TrainConfig

    monkeypatch.setattr(stream, "make_producer", lambda settings: None)  # nothing is sent here
    ckpt = CheckpointFile(tmp_path / "ckpt.json", PPOState)
    ckpt.checkpoint.state = PPOState(version=0, config={}, weights_file="w.pt")
    learner = stream.PPOLearner(TrainConfig(min_batch=32, max_batch_steps=1000), load_settings({"data_dir": str(tmp_path)}),
                                None, ckpt, SimpleNamespace(version=0), None, threading.Event(), None, "run")
    learner.intake.pool = [sample("short", 5)] * 31  # 31 trajectories, 155 steps: neither bound reached
    assert not learner.ready()
    learner.intake.pool = [sample("game", 500), sample("game-2", 499)]
    assert not learner.ready()
    learner.intake.pool.append(sample("game-3", 1))  # 1000 steps in 3 trajectories
    assert learner.ready()
