"""How fast does the pixel policy learn MiniWoB++ click-test and click-test-2 on the real pages?

Offline, without Kafka: N browser sandboxes (producers.sandboxes.browser, one shared headless
Chromium) run episodes of both tasks interleaved with a step budget of 1 (the first click must
succeed, as in ``flywheel demo``); the pixel policy acts on the sandboxes' screenshots as one
batch; every ``min_batch`` episodes one ``trainer.rl.update.ppo_update`` (the streaming trainer's
code) follows. Prints episodes and seconds until the last 100 episodes of each task reach
their targets (0.95 click-test, 0.90 click-test-2), with act / update / environment timings.

The trainer in the demo learns from the PNG screenshots in the blob store; this harness uses
the decoded screenshot the sandbox returns, which is the same pixels.

For fast tuning, ``--record FILE --frames N`` stores N real screenshots per task with the
buttons' rectangles (from the page's DOM), and ``--replay FILE`` learns on those frames with the
reward computed from the rectangles (inside the target button: 1; inside click-test-2's TWO:
-1; elsewhere 0) - no browser, seconds per run. Confirm a replay result on the live pages.

    python -m benchmarks.learn_miniwob --max-episodes 4000 --set lr=0.001 --policy '{"grid": 16}'
    python -m benchmarks.learn_miniwob --record var/bench/miniwob_frames.npz --frames 1000
    python -m benchmarks.learn_miniwob --replay var/bench/miniwob_frames.npz --set lr=0.003

``--bc-suite NAME`` measures the cold start on a task suite instead (producers.suites): the
scripted solvers demonstrate ``--bc-demos`` episodes per task, ``trainer.sft.bc`` clones them into
the pixel policy (the code ``flywheel bc`` runs), and greedy pi_sft and the untrained policy
(uniform over its heads: a random agent) each play ``--bc-eval`` unseen episodes per task:

    python -m benchmarks.learn_miniwob --bc-suite default --bc-demos 10 --bc-eval 6
    python -m benchmarks.learn_miniwob --bc-suite default --bc-demos 20,80 --bc-eval 20 --bc-sampled
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import sys
import tempfile
import time
from collections import deque
from pathlib import Path

import numpy as np
import torch


from infra.runtime.config import resolve
from schemas.blobs import BlobStore
from schemas.events import TaskSpec
from trainer.core import metric_names as M
from trainer.rl.config import TrainConfig
from infra.runtime.policy import build_policy
from infra.runtime.policy import PolicyInput
from trainer.rl.update import EpisodeSample, collate, ppo_update

TARGETS = {"click-test": 0.95, "click-test-2": 0.90}


class LiveEnv:
    """N browser sandboxes; ``reset`` then ``step`` one batch of one-step episodes."""

    def __init__(self, n: int) -> None:
        from producers.sandboxes.browser import BrowserSandbox
        from producers.sandboxes.browser_host import BrowserHost

        self.host = BrowserHost()
        blobs = BlobStore(tempfile.mkdtemp(prefix="learn-miniwob-"))
        self.sandboxes = [BrowserSandbox(blobs, host=self.host) for _ in range(n)]

    async def start(self) -> None:
        await asyncio.gather(*(s.start() for s in self.sandboxes))

    async def reset(self, specs: list[TaskSpec]) -> list[tuple[np.ndarray, str]]:
        obs = await asyncio.gather(*(s.reset(spec) for s, spec in zip(self.sandboxes, specs)))
        return [(o.image, o.observation.instruction) for o in obs]

    async def step(self, actions: list) -> list[tuple[float, bool]]:
        results = await asyncio.gather(*(s.step(a) for s, a in zip(self.sandboxes, actions)))
        return [(r.reward if r.done else 0.0, r.success) for r in results]

    async def close(self) -> None:
        await asyncio.gather(*(s.close() for s in self.sandboxes), return_exceptions=True)
        await self.host.close()


def button_boxes(dom: dict) -> dict[str, tuple[float, float, float, float]]:
    """Button text -> (x0, y0, x1, y1) in task-area pixels."""
    return {el["text"]: (el["x"], el["y"], el["x"] + el["w"], el["y"] + el["h"])
            for el in dom["elements"] if el["tag"] == "button"}


def replay_reward(task: str, boxes: dict, x: float, y: float, width: int, height: int) -> float:
    px, py = x * width, y * height
    inside = [t for t, (x0, y0, x1, y1) in boxes.items() if x0 <= px < x1 and y0 <= py < y1]
    if task == "click-test-2":
        return 1.0 if "ONE" in inside else -1.0 if "TWO" in inside else 0.0
    return 1.0 if inside else 0.0


class ReplayEnv:
    """Recorded real frames; rewards from the recorded button rectangles."""

    def __init__(self, path: str, rng: np.random.Generator) -> None:
        data = np.load(path, allow_pickle=True)
        self.frames = {t: (data[f"{t}/images"], list(data[f"{t}/meta"])) for t in TARGETS if f"{t}/images" in data}
        self.rng, self.current = rng, []

    async def start(self) -> None: ...

    async def reset(self, specs: list[TaskSpec]) -> list[tuple[np.ndarray, str]]:
        self.current = []
        for spec in specs:
            images, meta = self.frames[spec.name]
            k = int(self.rng.integers(len(images)))
            self.current.append((spec.name, images[k], meta[k]))
        return [(img, meta["instruction"]) for _, img, meta in self.current]

    async def step(self, actions: list) -> list[tuple[float, bool]]:
        out = []
        for (task, img, meta), a in zip(self.current, actions):
            r = replay_reward(task, meta["boxes"], a.x, a.y, img.shape[1], img.shape[0])
            out.append((r, r > 0))
        return out

    async def close(self) -> None: ...


async def record(path: str, frames: int, n: int) -> None:
    from producers.scripted import DOM_PROBE_JS

    env = LiveEnv(n)
    await env.start()
    out: dict[str, np.ndarray] = {}
    try:
        for task in TARGETS:
            images, meta = [], []
            for i in range(0, frames, n):
                specs = [TaskSpec(task_id=f"r{i + k}", suite="miniwob", name=task, seed=10_000 + i + k) for k in range(n)]
                obs = await env.reset(specs)
                doms = await asyncio.gather(*(s.query(DOM_PROBE_JS) for s in env.sandboxes))
                for (img, instr), dom in zip(obs, doms):
                    images.append(img)
                    meta.append({"instruction": instr, "boxes": button_boxes(dom)})
            out[f"{task}/images"], out[f"{task}/meta"] = np.stack(images), np.array(meta, dtype=object)
            print(f"recorded {len(images)} frames of {task}", flush=True)
    finally:
        await env.close()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(path, **out)


async def run(args, cfg: TrainConfig) -> dict:
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    policy = build_policy("pixel", "miniwob-bench", {**cfg.policy_overrides(), **json.loads(args.policy or "{}")})
    optimizer = torch.optim.Adam(policy.parameters(), lr=cfg.lr)
    tasks = args.tasks.split(",")
    recent = {t: deque(maxlen=100) for t in tasks}
    reached: dict[str, dict] = {}
    # --lag K: act with the weights of K updates ago, like a rollout worker behind the trainer
    snapshots: deque = deque([copy.deepcopy(policy.state_dict())], maxlen=args.lag + 1)
    actor = copy.deepcopy(policy) if args.lag else policy
    env = ReplayEnv(args.replay, rng) if args.replay else LiveEnv(args.sandboxes)
    await env.start()
    pool: list[EpisodeSample] = []
    t0 = time.perf_counter()
    episodes, env_s, act_s, upd = 0, 0.0, 0.0, []
    try:
        while episodes < args.max_episodes and len(reached) < len(tasks):
            names = [tasks[(episodes + k) % len(tasks)] for k in range(args.sandboxes)]
            specs = [TaskSpec(task_id=f"b{episodes + k}", suite="miniwob", name=n, seed=int(rng.integers(1 << 30)))
                     for k, n in enumerate(names)]
            te = time.perf_counter()
            obs = await env.reset(specs)
            ta = time.perf_counter()
            decisions = actor.act([PolicyInput(img, instr, img.shape[1], img.shape[0]) for img, instr in obs])
            tb = time.perf_counter()
            results = await env.step([d.action for d in decisions])
            env_s += (ta - te) + (time.perf_counter() - tb)
            act_s += tb - ta
            for k, ((img, instr), d, (reward, success)) in enumerate(zip(obs, decisions, results)):
                recent[names[k]].append(1.0 if success else 0.0)
                pool.append(EpisodeSample(f"e{episodes + k}", [policy.preprocess(img, (), instr)], [instr],
                                          [d.action], [d.logprob], [reward], actor.version))
            episodes += len(names)
            for t in tasks:
                if t not in reached and len(recent[t]) == 100 and np.mean(recent[t]) >= TARGETS[t]:
                    reached[t] = {"episodes": episodes, "seconds": round(time.perf_counter() - t0, 1)}
                    print(f"  reached {t}: {reached[t]}", flush=True)
            if len(pool) >= cfg.min_batch:
                m = ppo_update(policy, optimizer, collate(pool), cfg)
                policy.version += 1
                if args.lag:
                    snapshots.append(copy.deepcopy(policy.state_dict()))
                    actor.load_state_dict(snapshots[0])
                    actor.version = policy.version - len(snapshots) + 1
                upd.append(m[M.UPDATE_TIME_S])
                pool = []
                if policy.version % args.log_every == 0:
                    succ = " ".join(f"{t}={np.mean(recent[t]):.2f}" for t in tasks)
                    print(f"  v{policy.version} ep={episodes} {succ} ent={m[M.ENTROPY]:.2f} clip={m[M.CLIP_FRAC]:.2f} "
                          f"kl={m[M.APPROX_KL]:.3f} upd={m[M.UPDATE_TIME_S]:.2f}s t={time.perf_counter() - t0:.0f}s",
                          flush=True)
    finally:
        await env.close()
    wall = time.perf_counter() - t0
    return {"reached": reached, "episodes": episodes, "wall_s": round(wall, 1),
            "final_success_last100": {t: round(float(np.mean(recent[t])), 3) for t in tasks},
            "episodes_per_s": round(episodes / wall, 2), "env_s": round(env_s, 1),
            "act_ms_per_batch": round(1000 * act_s / max(episodes / args.sandboxes, 1), 1),
            "update_s_mean": round(float(np.mean(upd)), 3) if upd else None, "updates": len(upd),
            "policy": policy.config_dict(), "lr": cfg.lr, "ent_coef": cfg.ent_coef, "epochs": cfg.epochs,
            "minibatch_size": cfg.minibatch_size, "min_batch": cfg.min_batch, "tis_cap": cfg.tis_cap,
            "lag": args.lag, "replay": bool(args.replay)}


async def play(sandbox, spec: TaskSpec, choose, max_steps: int) -> tuple[bool, list]:
    """One episode; ``choose(obs, history, dom)`` -> action. Returns (success, [(obs, action)])."""
    from producers.scripted import DOM_PROBE_JS
    from schemas.events import Step

    obs, history, seen = await sandbox.reset(spec), [], []
    for i in range(max_steps):
        dom = await sandbox.query(DOM_PROBE_JS)
        action = choose(obs, history, dom)
        result = await sandbox.step(action)
        seen.append((obs, list(history), action))
        history.append(Step(episode_id="b", ts=1.0, step_index=i, started_at=1.0, observation=obs.observation,
                            action=action, policy="bench", policy_version=0, logprob=0.0))
        obs = result.obs
        if result.done:
            return bool(result.success), seen
    return False, seen


async def bc_suite(args) -> dict:
    """Scripted demonstrations -> behaviour cloning -> pi_sft vs the untrained policy, per task;
    with several ``--bc-demos`` counts (``10,40``), one pi_sft per count, each cloned from the
    first that many demonstrations of every task (how success grows with the data)."""
    from producers import scripted
    from producers.suites import get_suite, hotkeys
    from trainer.policies.pixel.config import pixel_config
    from trainer.sft.bc import Examples, bc_train

    suite = get_suite(args.bc_suite)
    counts = sorted({int(n) for n in str(args.bc_demos).split(",")})
    torch.manual_seed(0)
    env = LiveEnv(1)
    await env.start()
    sandbox, t0 = env.sandboxes[0], time.perf_counter()
    config = pixel_config(suite.action_types, json.loads(args.policy or "{}"), hotkeys())
    untrained = build_policy("pixel", "bc-bench", config)
    demos: dict[str, list[list]] = {}  # task -> per successful demonstration, its (obs, instruction, action) steps
    try:
        for name in suite.tasks:
            for seed in range(counts[-1]):
                ok, seen = await play(sandbox, TaskSpec(task_id=f"d{seed}", suite="miniwob", name=name, seed=seed),
                                      lambda o, h, dom: scripted.solve(name, o.observation.instruction, dom), suite.max_steps)
                if ok:  # only successes are demonstrations (V(s) = 1)
                    demos.setdefault(name, []).append(
                        [(untrained.preprocess(o.image, h, o.observation.instruction), o.observation.instruction, a) for o, h, a in seen])
        collect_s = time.perf_counter() - t0
        policies, fits = {}, {}
        for n in counts:
            steps = [(name, *st) for name, eps in demos.items() for ep in eps[:n] for st in ep]
            torch.manual_seed(0)
            policy = build_policy("pixel", "bc-bench", config)
            t1 = time.perf_counter()
            losses = bc_train(policy, Examples(torch.stack([s[1] for s in steps]), [s[2] for s in steps],
                                               [s[3] for s in steps], [s[0] for s in steps]), args.bc_epochs, 1e-2, 32)
            policies[f"pi_sft@{n}"] = policy
            fits[n] = {"steps": len(steps), "loss": [round(losses[0], 3), round(losses[-1], 3)],
                       "train_s": round(time.perf_counter() - t1, 1)}

        def agent(p, greedy):
            return lambda o, h, dom: p.act([PolicyInput(o.image, o.observation.instruction, 160, 210, history=h)],
                                           greedy=greedy)[0].action

        players = [("random", agent(untrained, False))]
        for label, p in policies.items():
            players += [(label, agent(p, True))] + ([(label + " sampled", agent(p, False))] if args.bc_sampled else [])
        table = {}
        for name in suite.tasks:
            row = {}
            for label, choose in players:
                wins = [(await play(sandbox, TaskSpec(task_id=f"e{seed}", suite="miniwob", name=name, seed=50_000 + seed),
                                    choose, suite.max_steps))[0] for seed in range(args.bc_eval)]
                row[label] = round(float(np.mean(wins)), 2)
            table[name] = row
            print(f"  {name:24s} " + "  ".join(f"{k} {v:.2f}" for k, v in row.items()), flush=True)
    finally:
        await env.close()
    return {"suite": suite.name, "demos_per_task": counts, "demos_found": {k: len(v) for k, v in demos.items()},
            "epochs": args.bc_epochs, "fits": fits, "collect_s": round(collect_s, 1),
            "wall_s": round(time.perf_counter() - t0, 1), "per_task": table,
            "mean": {k: round(float(np.mean([r[k] for r in table.values()])), 3) for k, _ in players}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bc-suite", default="", help="measure behaviour cloning on this task suite instead of PPO")
    ap.add_argument("--bc-demos", default="10", help="scripted demonstrations per task; a comma list (10,40): "
                                                     "one pi_sft per count, on the first that many")
    ap.add_argument("--bc-sampled", action="store_true", help="also play each pi_sft with sampled actions "
                                                              "(what the demo's success counts)")
    ap.add_argument("--bc-epochs", type=int, default=30)
    ap.add_argument("--bc-eval", type=int, default=6, help="unseen episodes per task and policy")
    ap.add_argument("--tasks", default="click-test,click-test-2")
    ap.add_argument("--sandboxes", type=int, default=4)
    ap.add_argument("--max-episodes", type=int, default=4000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--lag", type=int, default=0, help="act with the weights of this many updates ago")
    ap.add_argument("--log-every", type=int, default=5)
    ap.add_argument("--policy", default="", help="JSON merged into the pixel policy config")
    ap.add_argument("--set", action="append", default=[], help="TrainConfig override, e.g. lr=0.002")
    ap.add_argument("--record", default="", help="record real frames to this .npz and exit")
    ap.add_argument("--frames", type=int, default=1000, help="frames per task to record")
    ap.add_argument("--replay", default="", help="learn on frames recorded with --record")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.record:
        asyncio.run(record(args.record, args.frames, args.sandboxes))
        return 0
    if args.bc_suite:
        print(json.dumps(asyncio.run(bc_suite(args))), flush=True)
        return 0
    cfg = resolve(TrainConfig, dict(kv.split("=", 1) for kv in args.set), env={})
    print(json.dumps(asyncio.run(run(args, cfg))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
