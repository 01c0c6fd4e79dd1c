"""SFT of the pretrained language policy (SmolLM2-135M-Instruct) from scripted demonstrations,
measured on unseen MiniWoB++ episodes in a real Chromium.

    python -m benchmarks.learn_lm_sft --tasks click-test --demos 50 --epochs 3 --eval 20

The scripted solvers play the annotators, as in the main job's cold start. Each successful
demonstration step is rendered in the policy's one context format (``LMPolicy.context``:
instruction, earlier screenshots and actions, current screenshot; the assistant turn is the
UI-TARS "Thought / Action" text), which is what trainer.sft.sft_samples builds from flywheel.sft.v1.
``trainer.sft.lm_stream.train_step`` trains on them, the token-mean NLL of the assistant turn only.
The policy then acts greedily on unseen seeds, before SFT (the pretrained model with an untrained
vision adapter) and after. Prints one JSON line: success per task before and after, the loss,
and the time of each phase.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from pathlib import Path

import torch


from benchmarks.learn_miniwob import LiveEnv

from infra.runtime.policy import PolicyInput, build_policy
from schemas.events import Step, TaskSpec
from schemas.prompt import format_step_output
from trainer.core import metric_names as M
from trainer.sft.lm_config import PRETRAINED_LM, LMTrainConfig
from trainer.core.augment import random_shifts
from trainer.sft.lm_stream import train_step


def policy_input(obs, history: list) -> PolicyInput:
    o = obs.observation
    return PolicyInput(obs.image, o.instruction, o.screen_width, o.screen_height, history=list(history))


def as_step(obs, action, index: int) -> Step:
    return Step(episode_id="bench", ts=1.0, step_index=index, started_at=1.0, observation=obs.observation,
                action=action, policy="bench", policy_version=0, logprob=0.0)


async def episode(sandbox, spec: TaskSpec, choose, max_steps: int) -> tuple[bool, list]:
    """One episode; ``choose(obs, history, dom)`` -> action or None (no parsable action: failed).
    Returns (success, [(obs, history, action)])."""
    from producers.scripted import DOM_PROBE_JS

    obs, history, seen = await sandbox.reset(spec), [], []
    for i in range(max_steps):
        action = choose(obs, history, await sandbox.query(DOM_PROBE_JS))
        if action is None:
            return False, seen
        result = await sandbox.step(action)
        seen.append((obs, list(history), action))
        history.append(as_step(obs, action, i))
        obs = result.obs
        if result.done:
            return bool(result.success), seen
    return False, seen


def grounding(clicks: list[tuple[float, float, float, float]]) -> dict:
    """Does the click follow the target? Over (policy x, y, demonstrator x, y) rows: the correlation
    of the policy's and the demonstrator's coordinates, the spread of each (0: one point on every
    screen) and the mean error."""
    if len(clicks) < 3:
        return {}
    import numpy as np

    a = np.asarray(clicks)
    corr = [float(np.corrcoef(a[:, i], a[:, i + 2])[0, 1]) if a[:, i].std() > 0 else 0.0 for i in (0, 1)]
    return {"corr_x": round(corr[0], 2), "corr_y": round(corr[1], 2), "n": len(a),
            "std_policy_xy": [round(float(v), 3) for v in a[:, :2].std(0)],
            "std_target_xy": [round(float(v), 3) for v in a[:, 2:].std(0)],
            "mean_abs_err_xy": [round(float(v), 3) for v in np.abs(a[:, :2] - a[:, 2:]).mean(0)]}


async def measure(args) -> dict:
    from producers import scripted

    tasks = args.tasks.split(",")
    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    config = {**PRETRAINED_LM, "pretrained": args.pretrained} if args.pretrained else {}
    config.update(json.loads(args.policy or "{}"))
    t0 = time.perf_counter()
    policy = build_policy("lm", "lm-sft-bench", config)
    load_s = time.perf_counter() - t0
    env = LiveEnv(1)
    await env.start()
    sandbox = env.sandboxes[0]
    policy.blob_store = sandbox.blobs  # earlier screenshots in the context, as the rollout shows them
    coord_mode = policy.config["coord_mode"]

    clicks: list[tuple[float, float, float, float]] = []  # (policy x, y, demonstrator x, y) at first steps

    def greedy(obs, history, dom):
        action = policy.act([policy_input(obs, history)], greedy=True)[0].action
        shown = scripted.solve(spec_name[0], obs.observation.instruction, dom) if not history else None
        if shown is not None and hasattr(shown, "x") and action is not None and hasattr(action, "x"):
            clicks.append((action.x, action.y, shown.x, shown.y))
        return action

    spec_name = [""]

    async def success(name: str) -> float:
        spec_name[0] = name
        wins = [(await episode(sandbox, TaskSpec(task_id=f"e{s}", suite="miniwob", name=name, seed=50_000 + s),
                               greedy, args.max_steps))[0] for s in range(args.eval)]
        return sum(wins) / len(wins)

    try:
        t = time.perf_counter()
        before = {name: await success(name) for name in tasks} if args.before else {}
        before_s = time.perf_counter() - t

        t = time.perf_counter()
        samples, shift_rng = [], random.Random(1)
        for name in tasks:
            for seed in range(args.demos):
                ok, seen = await episode(sandbox, TaskSpec(task_id=f"d{seed}", suite="miniwob", name=name, seed=seed),
                                         lambda o, h, dom: scripted.solve(name, o.observation.instruction, dom),
                                         args.max_steps)
                for i, (obs, history, action) in enumerate(seen if ok else []):  # V(s) = 1 only
                    answer = format_step_output(as_step(obs, action, i), coord_mode)
                    samples.append(policy.render(policy.context(policy_input(obs, history)), answer, score="last"))
                    if i == 0:  # translated copies of a first step (no earlier screenshot to keep in line)
                        for image, moved in random_shifts(obs.image, action, args.shift, args.shift_frac, shift_rng):
                            inp = PolicyInput(image, obs.observation.instruction, obs.observation.screen_width,
                                              obs.observation.screen_height, history=[])
                            text = format_step_output(as_step(obs, moved, i), coord_mode)
                            samples.append(policy.render(policy.context(inp), text, score="last"))
        collect_s = time.perf_counter() - t

        t = time.perf_counter()
        cfg = LMTrainConfig(lr=args.lr, minibatch_samples=args.minibatch)
        optimizer = torch.optim.AdamW(policy.param_groups(args.lr, args.adapter_lr_mult), lr=args.lr)
        rng, losses = random.Random(0), []
        for epoch in range(args.epochs):
            order = list(range(len(samples)))
            rng.shuffle(order)
            for i in range(0, len(order), args.batch):
                losses.append(train_step(policy, optimizer, [samples[j] for j in order[i:i + args.batch]], cfg)[M.SFT_LOSS])
            print(f"  epoch {epoch + 1}: loss {losses[-1]:.3f} ({time.perf_counter() - t:.0f} s)", flush=True)
        train_s = time.perf_counter() - t

        t = time.perf_counter()
        clicks.clear()
        after = {name: await success(name) for name in tasks}
        after_s = time.perf_counter() - t
        after_grounding = grounding(clicks)
        # the same greedy policy on seeds it was trained on: memorised vs generalised
        on_train = {name: sum([(await episode(sandbox, TaskSpec(task_id=f"t{s}", suite="miniwob", name=name, seed=s),
                                             greedy, args.max_steps))[0] for s in range(args.eval_train)]) / args.eval_train
                    for name in tasks} if args.eval_train else {}
    finally:
        await env.close()
    return {"pretrained": args.pretrained, "tasks": tasks, "demos_per_task": args.demos, "samples": len(samples),
            "shift_copies": args.shift, "adapter_lr_mult": args.adapter_lr_mult,
            "epochs": args.epochs, "lr": args.lr, "eval_episodes": args.eval,
            "success_before": before, "success_after": after, "success_on_demonstrated_seeds": on_train,
            "first_click_vs_demonstrator_after": after_grounding,
            "loss_first_last": [round(losses[0], 3), round(losses[-1], 3)] if losses else None,
            "seconds": {"load": round(load_s, 1), "eval_before": round(before_s, 1), "demonstrations": round(collect_s, 1),
                        "sft": round(train_s, 1), "eval_after": round(after_s, 1)}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", default="click-test")
    ap.add_argument("--demos", type=int, default=50, help="scripted demonstrations per task")
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--batch", type=int, default=8, help="samples per optimiser step")
    ap.add_argument("--minibatch", type=int, default=4, help="samples per forward pass")
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--eval", type=int, default=20, help="unseen episodes per task, before and after")
    ap.add_argument("--max-steps", type=int, default=4)
    ap.add_argument("--before", action=argparse.BooleanOptionalAction, default=True,
                    help="also measure the policy before SFT (--no-before: skip it)")
    ap.add_argument("--eval-train", type=int, default=0,
                    help="after SFT, also act on this many of the demonstrated seeds (memorised vs generalised)")
    ap.add_argument("--pretrained", default="smollm2-135m", help="empty: the tiny model of --policy")
    ap.add_argument("--policy", default="", help="JSON merged into the LM config")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--adapter-lr-mult", type=float, default=10.0,
                    help="learning rate of the patch adapter and value head, as a multiple of --lr")
    ap.add_argument("--shift", type=int, default=0,
                    help="grounding augmentation: translated copies of each first step (trainer.core.augment)")
    ap.add_argument("--shift-frac", type=float, default=0.3, help="largest translation, as a fraction of the screen side")
    print(json.dumps(asyncio.run(measure(ap.parse_args()))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
