"""The pixel policy learns: a few hundred synthetic click-test episodes clearly raise success,
driven through the same policy and PPO update code as the streaming trainer
(benchmarks/learn_synthetic.py prints the full figures)."""

import torch

from trainer.rl.config import TrainConfig
from tests.fakes.clicks import learn


def test_few_hundred_episodes_clearly_improve_click_success():
    torch.set_num_threads(2)
    cfg = TrainConfig(policy_config='{"grid": 8, "channels": [8, 16, 16]}', min_batch=32, lr=3e-3, seed=0)
    out = learn("click-test", target=0.9, max_episodes=640, cfg=cfg)
    # random clicking on an 8 x 8 grid hits the button about 1 time in 15
    assert out["final_success_last100"] >= 0.5, out
