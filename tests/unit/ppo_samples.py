"""A tiny pixel policy and four one-step click-test samples it acted on, for PPO update tests."""

from __future__ import annotations

import numpy as np
import torch

from infra.runtime.policy import PolicyInput, build_policy
from tests.fakes.clicks import make_episode
from trainer.rl.update import EpisodeSample


def tiny_policy_and_samples(rewards: list[float]):
    """-> (policy, samples): one sample per reward, each the policy's own sampled action."""
    torch.manual_seed(0)
    policy = build_policy("pixel", "p", {"grid": 4, "channels": [4, 8, 8]})
    rng = np.random.default_rng(0)
    episodes = [make_episode("click-test", rng) for _ in rewards]
    inputs = [PolicyInput(e.image, e.instruction, 160, 210) for e in episodes]
    samples = [EpisodeSample(f"e{k}", [policy.preprocess(i.image)], [i.instruction], [d.action], [d.logprob], [r], 0)
               for k, (i, d, r) in enumerate(zip(inputs, policy.act(inputs), rewards))]
    return policy, samples
