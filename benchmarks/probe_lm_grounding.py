"""Does the language policy's click follow the screen? A fast, offline probe of SFT grounding.

    python -m benchmarks.probe_lm_grounding --task click-test --epochs 3
    python -m benchmarks.probe_lm_grounding --lm-lr-mult 0 --epochs 6   # adapter only, LM frozen

The first screens of ``--demos`` scripted click-test episodes and ``--eval`` unseen ones are taken
once from real Chromium and cached under var/probe/ (with the scripted click and the buttons'
boxes). SFT then trains SmolLM2-135M-Instruct with a fresh patch adapter on the demonstrated first
steps exactly as benchmarks/learn_lm_sft.py does (``LMPolicy.render`` + ``trainer.sft.lm_stream.train_step``),
and the policy acts greedily on the cached unseen screens; a click scores as MiniWoB scores it
(inside the button). No browser during training or evaluation, so a run takes about half the time
of learn_lm_sft.py and measures what it cannot: the correlation of the policy's click with the
demonstrator's and the spread of the policy's clicks (0 = the same point on every screen).
Prints one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import pickle
import random
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]

from benchmarks.learn_lm_sft import grounding
from benchmarks.learn_miniwob import LiveEnv, button_boxes, replay_reward

from infra.runtime.policy import PolicyInput, build_policy
from schemas.events import TaskSpec
from schemas.uitars import render_output
from trainer.core import metric_names as M
from trainer.core.augment import random_shifts
from trainer.sft.lm_config import PRETRAINED_LM, LMTrainConfig
from trainer.sft.lm_stream import train_step


async def collect(task: str, demos: int, unseen: int) -> dict[str, list[dict]]:
    """First screens of scripted episodes (seeds 0.. and 50000..), with the scripted click."""
    from producers import scripted
    from producers.scripted import DOM_PROBE_JS

    env = LiveEnv(1)
    await env.start()
    out: dict[str, list[dict]] = {}
    try:
        for split, seeds in (("train", range(demos)), ("eval", range(50_000, 50_000 + unseen))):
            out[split] = []
            for s in seeds:
                obs = await env.sandboxes[0].reset(TaskSpec(task_id=f"p{s}", suite="miniwob", name=task, seed=s))
                dom = await env.sandboxes[0].query(DOM_PROBE_JS)
                o = obs.observation
                out[split].append({"image": obs.image, "instruction": o.instruction, "w": o.screen_width,
                                   "h": o.screen_height, "action": scripted.solve(task, o.instruction, dom),
                                   "boxes": button_boxes(dom)})
    finally:
        await env.close()
    return out


def screens(task: str, demos: int, unseen: int) -> dict[str, list[dict]]:
    path = ROOT / "var" / "probe" / f"{task}-{demos}-{unseen}.pkl"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(pickle.dumps(asyncio.run(collect(task, demos, unseen))))
    return pickle.loads(path.read_bytes())


def policy_input(row: dict) -> PolicyInput:
    return PolicyInput(row["image"], row["instruction"], row["w"], row["h"], history=[])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="click-test")
    ap.add_argument("--demos", type=int, default=50)
    ap.add_argument("--eval", type=int, default=40, help="unseen screens")
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--adapter-lr-mult", type=float, default=10.0)
    ap.add_argument("--lm-lr-mult", type=float, default=1.0, help="0: the LM is frozen, only the adapter learns")
    ap.add_argument("--shift", type=int, default=0, help="translated copies of each demonstration (trainer.core.augment)")
    ap.add_argument("--policy", default="{}", help="JSON merged into the LM config")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(a.threads)
    data = screens(a.task, a.demos, a.eval)
    policy = build_policy("lm", "grounding-probe", {**PRETRAINED_LM, **json.loads(a.policy)})
    mode, rng = policy.config["coord_mode"], random.Random(1)

    samples = []
    for row in data["train"]:
        copies = [(row["image"], row["action"])] + random_shifts(row["image"], row["action"], a.shift, 0.3, rng)
        for image, action in copies:
            answer = render_output("", action, row["w"], row["h"], mode)
            samples.append(policy.render(policy.context(policy_input({**row, "image": image})), answer, score="last"))

    optimizer = torch.optim.AdamW(policy.param_groups(a.lr, a.adapter_lr_mult), lr=a.lr)
    optimizer.param_groups[0]["lr"] = a.lr * a.lm_lr_mult
    if a.lm_lr_mult == 0:
        policy.lm.requires_grad_(False)
    cfg, order_rng, losses, t0 = LMTrainConfig(lr=a.lr, minibatch_samples=4), random.Random(0), [], time.perf_counter()
    for epoch in range(a.epochs):
        order = list(range(len(samples)))
        order_rng.shuffle(order)
        for i in range(0, len(order), a.batch):
            losses.append(train_step(policy, optimizer, [samples[j] for j in order[i:i + a.batch]], cfg)[M.SFT_LOSS])
        print(f"epoch {epoch + 1}/{a.epochs}: loss {losses[-1]:.3f}, {time.perf_counter() - t0:.0f} s",
              file=sys.stderr, flush=True)
    train_s = time.perf_counter() - t0

    wins, clicks, rows = [], [], data["eval"]
    for k in range(0, len(rows), 8):
        chunk = rows[k:k + 8]
        for row, decision in zip(chunk, policy.act([policy_input(r) for r in chunk], greedy=True)):
            act = decision.action
            if act is None or not hasattr(act, "x"):
                wins.append(0.0)
                continue
            wins.append(max(0.0, replay_reward(a.task, row["boxes"], act.x, act.y, row["w"], row["h"])))
            clicks.append((act.x, act.y, row["action"].x, row["action"].y))
    print(json.dumps({
        "task": a.task, "samples": len(samples), "epochs": a.epochs, "lr": a.lr, "adapter_lr_mult": a.adapter_lr_mult,
        "lm_lr_mult": a.lm_lr_mult, "shift": a.shift, "policy": json.loads(a.policy),
        "success_unseen": round(float(np.mean(wins)), 3), "first_click_vs_demonstrator": grounding(clicks),
        "loss_first_last": [round(losses[0], 3), round(losses[-1], 3)], "sft_s": round(train_s)}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
