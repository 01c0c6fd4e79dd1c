"""How fast does the pixel policy learn "click the target" from random weights?

Drives trainer.policies.pixel.model and trainer.rl.update (the same PPO code the streaming trainer runs)
on the synthetic click-test / click-test-2 of tests.fakes.clicks, and prints episodes and
seconds until the success rate of the last 100 sampled episodes reaches the target.

    python -m benchmarks.learn_synthetic --task click-test-2 --target 0.9
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch


from trainer.rl.config import TrainConfig
from benchmarks.fakes import learn  # test fakes: benchmarks/fakes.py


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
    from infra.runtime.config import resolve
    cfg = resolve(TrainConfig, overrides, env={})
    tasks = ["click-test", "click-test-2"] if args.task == "both" else [args.task]
    for task in tasks:
        target = args.target or (0.95 if task == "click-test" else 0.90)
        print(json.dumps(learn(task, target, args.max_episodes, cfg, log_every=10)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
