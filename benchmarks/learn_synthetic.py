"""How fast does the pixel policy learn "click the target" from random weights?

Drives trainer.policies.pixel and trainer.update (the same PPO code the streaming trainer runs)
on the synthetic click-test / click-test-2 of trainer.synthetic, and prints episodes and
seconds until the success rate of the last 100 sampled episodes reaches the target.

    python benchmarks/learn_synthetic.py --task click-test-2 --target 0.9
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import deque
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from trainer.config import TrainConfig  # noqa: E402
from trainer.policies import build_policy  # noqa: E402
from trainer.policies.base import PolicyInput  # noqa: E402
from trainer.synthetic import make_episode  # noqa: E402
from trainer.update import EpisodeSample, collate, ppo_update  # noqa: E402


def learn(task: str, target: float, max_episodes: int, cfg: TrainConfig, log_every: int = 0) -> dict:
    """Collect ``cfg.min_batch`` episodes with the current policy, update, repeat."""
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    policy = build_policy("pixel", "synthetic", cfg.policy_overrides())
    optimizer = torch.optim.Adam(policy.parameters(), lr=cfg.lr)
    recent: deque[float] = deque(maxlen=100)
    t0, episodes, update_times, act_times = time.perf_counter(), 0, [], []
    reached = None
    while episodes < max_episodes:
        eps = [make_episode(task, rng) for _ in range(cfg.min_batch)]
        ta = time.perf_counter()
        decisions = policy.act([PolicyInput(e.image, e.instruction, 160, 210) for e in eps])
        act_times.append((time.perf_counter() - ta) / len(eps))
        samples = []
        for k, (e, d) in enumerate(zip(eps, decisions)):
            r = e.reward(d.action.x, d.action.y)
            recent.append(r)
            samples.append(EpisodeSample(f"e{episodes + k}", [policy.preprocess(e.image)], [e.instruction],
                                         [d.action], [d.logprob], [r], policy.version))
        episodes += len(eps)
        if reached is None and len(recent) == 100 and np.mean(recent) >= target:
            reached = {"episodes": episodes, "seconds": round(time.perf_counter() - t0, 1)}
            break
        m = ppo_update(policy, optimizer, collate(samples), cfg)
        policy.version += 1
        update_times.append(m["update_time_s"])
        if log_every and policy.version % log_every == 0:
            print(f"  v{policy.version} episodes={episodes} success@100={np.mean(recent):.2f} "
                  f"entropy={m['entropy']:.2f} clip={m['clip_frac']:.2f} t={time.perf_counter() - t0:.0f}s", flush=True)
    return {"task": task, "target": target, "reached": reached, "episodes": episodes,
            "final_success_last100": round(float(np.mean(recent)), 3),
            "update_time_s_per_batch": round(float(np.mean(update_times)), 4) if update_times else None,
            "act_ms_per_step": round(1000 * float(np.mean(act_times)), 2),
            "batch": cfg.min_batch, "wall_s": round(time.perf_counter() - t0, 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="both", choices=("click-test", "click-test-2", "both"))
    ap.add_argument("--target", type=float, default=None, help="default 0.95 (click-test), 0.90 (click-test-2)")
    ap.add_argument("--max-episodes", type=int, default=6000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--set", action="append", default=[], help="TrainConfig override, e.g. lr=0.002")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    overrides = dict(kv.split("=", 1) for kv in args.set)
    from infra.config import resolve
    cfg = resolve(TrainConfig, overrides, env={})
    tasks = ["click-test", "click-test-2"] if args.task == "both" else [args.task]
    for task in tasks:
        target = args.target or (0.95 if task == "click-test" else 0.90)
        print(json.dumps(learn(task, target, args.max_episodes, cfg, log_every=10)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
