"""Does PPO, or DPO on reflection pairs, improve the language policy on pi_SFT? Both start from
the same pi_SFT and are measured on the same unseen MiniWoB++ episodes in a real Chromium.

    python -m benchmarks.learn_lm_phases --tasks click-test-2 --seed 0

Every phase runs the main job's own functions, without Kafka in between (so a phase takes minutes,
not the tens of minutes the main job's processes need sharing 2 cores):

- episodes: ``producers.episode.run_episode`` with the in-process ``TorchClient`` (the rollout
  worker's loop), events folded by ``streams.assemble.add_event``, scored by the ``rule-v1``
  scorer of the streams;
- cold start: ``--demos`` scripted episodes per task, the V(s) = 1 ones cloned by
  ``trainer.policies.lm.bc.clone_lm`` with ``flywheel bc``'s defaults (pi_SFT);
- evaluation: greedy episodes on seeds 50,000 + i (never demonstrated, never trained on), the
  same seeds for every phase, so the comparison is paired;
- PPO: ``--ppo-updates`` batches of ``--ppo-episodes`` sampled episodes on fresh seeds, each made
  into training data by ``trainer.rl.intake.to_episode`` and learnt by ``trainer.rl.update.ppo_update``
  (decoupled, length-adaptive GAE, clip-higher, truncated importance weights; the first
  ``--vp-updates`` batches train the critic alone, as value pretraining does);
- DPO: ``--dpo-episodes`` sampled (``--dpo-greedy``: greedy) pi_SFT episodes per task on fresh
  seeds; each failed one is annotated by ``producers.reflection.annotate`` (the scripted solvers
  replay it in the same browser: error-correction and post-reflection pairs), the pairs made into
  inputs by ``trainer.dpo.inputs.pair_inputs`` and learnt by ``trainer.dpo.train.dpo_train`` against
  pi_SFT; ``--dpo-pairs-cache`` keeps them for later runs with other DPO settings. With
  ``--dpo-rounds R`` > 1 it is iterated (online reflection tuning): round r annotates the greedy
  (or sampled) failures of round r-1's policy on its own fresh seeds and trains DPO against that
  policy as the reference.

Prints progress, then one JSON line: greedy success per task after each phase with its standard
error, the PPO and DPO statistics, and the seconds of each phase. ``--out`` also writes it.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import logging
import math
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import torch


from infra.runtime.config import json_object
from infra.runtime.policy import build_policy
from producers.annotate import BrowserReplay
from producers.episode import run_episode
from producers.policy_client import ScriptedClient, TorchClient
from producers.reflection import NoSolver, ReplayDiverged, annotate
from trainer.core.learner import save_torch_atomic
from schemas.blobs import BlobStore
from schemas.events import ScoredTrajectory, TaskSpec
from streams.assemble import add_event
from streams.score import make_scorer
from trainer.core import metric_names as M
from trainer.sft.bc_config import BCConfig
from trainer.policies.lm.bc import clone_lm
from trainer.rl.config import TrainConfig
from trainer.dpo.train import dpo_train, reference_logprobs
from trainer.dpo.config import DPOConfig
from trainer.dpo.inputs import pair_inputs
from trainer.sft.lm_config import PRETRAINED_LM
from trainer.rl.intake import to_episode
from trainer.rl.update import collate, make_optimizer, ppo_update

EVAL_SEED, DEMO_SEED, PPO_SEED, DPO_SEED = 50_000, 0, 100_000, 200_000


class Live:
    """One browser sandbox; episodes through the rollout's loop, scored as the streams score them."""

    def __init__(self, step_ms: int = 100) -> None:
        from producers.sandboxes.browser import BrowserSandbox
        from producers.sandboxes.browser_host import BrowserHost

        self.host = BrowserHost()
        self.blobs = BlobStore(tempfile.mkdtemp(prefix="learn-lm-phases-"))
        self.sandbox = BrowserSandbox(self.blobs, host=self.host, step_ms=step_ms)
        self.scorer = make_scorer("rule-v1")

    async def start(self) -> None:
        await self.sandbox.start()

    async def close(self) -> None:
        await self.sandbox.close()
        await self.host.close()

    async def play(self, client, spec: TaskSpec) -> ScoredTrajectory:
        events: list = []
        await run_episode(spec, self.sandbox, client, events.append, sandbox_name="bench-0", worker_id="bench")
        state = traj = None
        for event in events:
            state, done = add_event(state, event)
            traj = done or traj
        if traj is None:
            raise RuntimeError(f"episode of {spec.task_id} did not complete: {[type(e).__name__ for e in events]}")
        return self.scorer.score(traj, time.time())


def sft_key(args) -> dict[str, Any]:
    """What pi_SFT and its evaluation depend on (a cached one must match)."""
    return {k: getattr(args, k) for k in ("tasks", "seed", "demos", "sft_epochs", "eval", "max_steps", "pretrained",
                                          "policy")}


def spec(name: str, seed: int, max_steps: int) -> TaskSpec:
    return TaskSpec(task_id=f"{name}-{seed}", suite="miniwob", name=name, seed=seed, max_steps=max_steps,
                    timeout_s=300.0)


def rate(wins: list[bool]) -> dict[str, float]:
    p = sum(wins) / max(len(wins), 1)
    return {"success": round(p, 3), "stderr": round(math.sqrt(p * (1 - p) / max(len(wins), 1)), 3), "n": len(wins)}


async def evaluate(live: Live, policy, tasks: list[str], n: int, max_steps: int) -> dict[str, dict]:
    client = TorchClient("bench", kind="lm", policy=policy, blobs=live.blobs, greedy=True)
    out = {}
    for name in tasks:
        trajs = [(await live.play(client, spec(name, EVAL_SEED + s, max_steps))).trajectory for s in range(n)]
        out[name] = {**rate([t.success for t in trajs]),
                     "steps_mean": round(sum(len(t.steps) for t in trajs) / max(len(trajs), 1), 2),
                     "wins": "".join("1" if t.success else "0" for t in trajs)}
    return out


def paired(before: dict, after: dict) -> dict[str, Any] | None:
    """The same episodes before and after a phase: how many it turned from failure to success and
    back, and the exact two-sided sign test's p-value on those (McNemar's exact test)."""
    if "wins" not in before or "wins" not in after or len(before["wins"]) != len(after["wins"]):
        return None
    gained = sum(a == "0" and b == "1" for a, b in zip(before["wins"], after["wins"]))
    lost = sum(a == "1" and b == "0" for a, b in zip(before["wins"], after["wins"]))
    n, k = gained + lost, min(gained, lost)
    p = min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n) if n else 1.0
    return {"gained": gained, "lost": lost, "p_value": float(f"{p:.3g}")}  # 3e-06, not round()'s 0.0


async def sampled(live: Live, policy, tasks: list[str], n: int, seed0: int, max_steps: int,
                  greedy: bool = False) -> list[ScoredTrajectory]:
    client = TorchClient("bench", kind="lm", policy=policy, blobs=live.blobs, greedy=greedy)
    return [await live.play(client, spec(name, seed0 + s, max_steps)) for s in range(n) for name in tasks]


async def run_ppo(live: Live, policy, args, tasks: list[str], log) -> dict[str, Any]:
    """PPO from pi_SFT, as `flywheel train` does it for the main job's language policy."""
    cfg = TrainConfig(policy_kind="lm", lr=args.ppo_lr, head_lr_mult=args.ppo_head_lr_mult, epochs=args.ppo_epochs,
                      minibatch_size=args.ppo_minibatch, seed=args.seed).validate()
    optimizer = make_optimizer(policy, cfg.lr, cfg.head_lr_mult)
    gen = torch.Generator().manual_seed(args.seed)
    history, seed0, skipped = [], PPO_SEED + 1000 * args.seed, 0
    for u in range(args.vp_updates + args.ppo_updates):
        per_task = max(1, args.ppo_episodes // len(tasks))
        scored = await sampled(live, policy, tasks, per_task, seed0 + u * per_task, args.max_steps)
        episodes = []
        for s in scored:
            try:
                episodes.append(to_episode(s, policy, live.blobs))
            except ValueError:  # as the trainer does: e.g. an empty reply is no text to score
                skipped += 1
        if not episodes:
            continue
        batch = collate(episodes)
        critic_only = u < args.vp_updates
        stats = ppo_update(policy, optimizer, batch, cfg, critic_only=critic_only, generator=gen)
        row = {"update": u, "critic_only": critic_only, "success": stats[M.SUCCESS_RATE],
               "ev": round(stats[M.EXPLAINED_VARIANCE], 3), "value_return_corr": round(stats[M.REWARD_CORR], 3),
               "kl": round(stats[M.APPROX_KL], 4), "clip": round(stats[M.CLIP_FRAC], 3),
               "entropy": round(stats[M.ENTROPY], 3), "seconds": round(stats[M.UPDATE_TIME_S], 1)}
        history.append(row)
        log(f"  ppo {'critic' if critic_only else 'update'} {u}: {row}")
    per_task = max(1, args.ppo_episodes // len(tasks))
    return {"updates": history, "episodes": (args.vp_updates + args.ppo_updates) * per_task * len(tasks),
            "untrainable_episodes": skipped}


def pairs_key(args) -> dict[str, Any]:
    """What a DPO phase's pairs depend on (a cached set must match): pi_SFT and how its episodes ran."""
    return {**sft_key(args), "dpo_episodes": args.dpo_episodes, "dpo_greedy": args.dpo_greedy}


def round_key(args, r: int) -> dict[str, Any]:
    """What round ``r``'s pairs depend on: pi_SFT, the episodes, and (after the first round) the
    DPO settings of the rounds before, which made the policy whose failures they are."""
    if r == 0:
        return pairs_key(args)
    return {**pairs_key(args), "round": r + 1, **{k: getattr(args, k) for k in (
        "dpo_lr", "dpo_head_lr_mult", "dpo_beta", "dpo_epochs", "dpo_nll", "dpo_minibatch")}}


def round_cache(args, r: int) -> Path | None:
    if not args.dpo_pairs_cache:
        return None
    path = Path(args.dpo_pairs_cache)
    return path if r == 0 else path.with_name(f"{path.stem}-round{r + 1}{path.suffix}")


async def reflection_pairs(live: Live, policy, args, tasks: list[str], r: int = 0) -> tuple[Any, dict[str, Any]]:
    """The policy's failures on fresh seeds (sampled, or greedy with ``--dpo-greedy``: the mistakes
    its greedy evaluation makes), annotated by the scripted solvers, as DPO inputs. Round ``r``
    has seeds of its own, after the earlier rounds'."""
    seed0 = DPO_SEED + 1000 * args.seed + r * args.dpo_episodes
    scored = await sampled(live, policy, tasks, args.dpo_episodes, seed0, args.max_steps, greedy=args.dpo_greedy)
    outcomes, pairs = Counter(), []
    replay = BrowserReplay(live.blobs, live.sandbox.step_ms, sandbox=live.sandbox)  # the same browser replays
    for s in scored:
        traj = s.trajectory
        if traj.success or traj.status != "ended":
            outcomes["not_failed" if traj.success else "aborted"] += 1
            continue
        try:
            note = await annotate(traj, replay)
        except (NoSolver, ReplayDiverged) as exc:
            outcomes[type(exc).__name__] += 1
            continue
        outcomes[note.outcome] += 1
        pairs += note.pairs
    await live.sandbox.flush()
    data, skipped = pair_inputs(policy, pairs, live.blobs)
    return data, {"episodes": len(scored), "greedy": args.dpo_greedy,
                  "sampled_success": rate([s.trajectory.success for s in scored]),
                  "annotations": dict(outcomes), "pairs": dict(Counter(p.kind for p in pairs)),
                  "skipped": dict(skipped)}


async def run_dpo(live: Live, policy, args, tasks: list[str], log) -> dict[str, Any]:
    """``--dpo-rounds`` rounds of ``dpo_round``; the last round's statistics, and with several
    rounds each round's (``rounds``; ``--dpo-eval-rounds``: each earlier round's policy scored)."""
    rounds = []
    for r in range(args.dpo_rounds):
        rounds.append(await dpo_round(live, policy, args, tasks, log, r))
        if r + 1 < args.dpo_rounds and args.dpo_eval_rounds:
            rounds[-1]["eval"] = await evaluate(live, policy, tasks, args.eval, args.max_steps)
            log(f"  dpo after round {r + 1}: {rounds[-1]['eval']}")
    return rounds[0] if len(rounds) == 1 else {**rounds[-1], "rounds": rounds}


async def dpo_round(live: Live, policy, args, tasks: list[str], log, r: int) -> dict[str, Any]:
    """Reflection pairs from the policy's own failures, annotated by the scripted solvers, then DPO
    against the policy as it was (pi_SFT in the first round). With ``--dpo-pairs-cache`` each
    round's pairs are made once and read back by later runs."""
    cache, key = round_cache(args, r), round_key(args, r)
    if cache is not None and cache.exists():
        saved = torch.load(cache, weights_only=False)
        if saved["key"] != key:
            raise SystemExit(f"{cache} holds the pairs of {saved['key']}, not {key}: name another file")
        data, out = saved["data"], saved["summary"]
        log(f"  dpo round {r + 1}: {out['pairs']} pairs from {cache}")
    else:
        data, out = await reflection_pairs(live, policy, args, tasks, r)
        log(f"  dpo round {r + 1}: {out['pairs']} pairs from {out['episodes']} episodes (success {out['sampled_success']})")
        if cache is not None and data is not None:
            cache.parent.mkdir(parents=True, exist_ok=True)
            save_torch_atomic({"key": key, "data": data, "summary": out}, cache)
    if data is None:
        log("  dpo: no usable pair")
        return out
    cfg = DPOConfig(beta=args.dpo_beta, epochs=args.dpo_epochs, lr=args.dpo_lr, head_lr_mult=args.dpo_head_lr_mult,
                    minibatch_size=args.dpo_minibatch, seed=args.seed, nll_weight=args.dpo_nll).validate()
    ref_c, ref_r = reference_logprobs(policy, data)
    wanted = {int(e) for e in args.dpo_eval_epochs.split(",") if e.strip()}  # checked in main
    snapshots: dict[int, dict] = {}

    def keep(epoch: int) -> None:
        if epoch in wanted:
            snapshots[epoch] = copy.deepcopy(policy.state_dict())

    history = dpo_train(policy, data, ref_c, ref_r, cfg.beta, cfg.epochs, cfg.learning_rate("lm"),
                        cfg.minibatch_size, cfg.seed, cfg.passes("lm"), cfg.head_lr_mult, cfg.nll_weight, keep)
    out.update({"used": len(data), "first_epoch": history[0], "last_epoch": history[-1], "epochs": history})
    if snapshots:  # the policy after earlier epochs, on the same episodes as every phase
        final = copy.deepcopy(policy.state_dict())
        out["after_epoch"] = {}
        for epoch, weights in sorted(snapshots.items()):
            policy.load_state_dict(weights)
            policy.eval()
            out["after_epoch"][epoch] = await evaluate(live, policy, tasks, args.eval, args.max_steps)
            log(f"  dpo after epoch {epoch}: {out['after_epoch'][epoch]}")
        policy.load_state_dict(final)
    log(f"  dpo on {len(data)} pairs: loss {history[0][M.DPO_LOSS]:.3f} -> {history[-1][M.DPO_LOSS]:.3f}, "
        f"accuracy {history[-1][M.DPO_ACCURACY]:.2f}")
    return out


async def measure(args) -> dict[str, Any]:
    tasks = args.tasks.split(",")
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    t_start = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - t_start:6.0f} s] {msg}", flush=True)

    seconds: dict[str, float] = {}
    live = Live()
    await live.start()
    try:
        policy = build_policy("lm", "bench", {**PRETRAINED_LM, "pretrained": args.pretrained, "seed": args.seed,
                                              **json_object(args.policy, "--policy")})
        policy.blob_store = live.blobs
        cache = Path(args.sft_cache) if args.sft_cache else None
        if cache is not None and cache.exists():  # the same tasks, seed and demonstrations: skip to the phases
            saved = torch.load(cache, weights_only=False)
            if saved["key"] != sft_key(args):
                raise SystemExit(f"{cache} holds pi_SFT of {saved['key']}, not {sft_key(args)}: name another --sft-cache")
            policy.load_state_dict(saved["weights"])
            results, seconds = {"sft": saved["eval"]}, dict(saved["seconds"])
            log(f"pi_SFT from {cache}: {results['sft']}")
            if any("wins" not in r for r in results["sft"].values()):  # saved before episodes were kept
                results["sft"] = saved["eval"] = await evaluate(live, policy, tasks, args.eval, args.max_steps)
                save_torch_atomic(saved, cache)
                log(f"pi_SFT greedy again, episode by episode: {results['sft']}")
        else:
            results = {}
            t = time.perf_counter()
            demo_client = ScriptedClient()
            demos = [s for name in tasks for seed in range(args.demos)
                     for s in [await live.play(demo_client, spec(name, DEMO_SEED + seed, args.max_steps))]
                     if s.verdict == 1]
            seconds["demonstrations"] = time.perf_counter() - t
            log(f"{len(demos)} successful demonstrations of {args.demos * len(tasks)}")
            t = time.perf_counter()
            sft = clone_lm(policy, demos, live.blobs, BCConfig(policy_kind="lm", seed=args.seed, epochs=args.sft_epochs))
            seconds["sft"] = time.perf_counter() - t
            log(f"SFT on {sft['samples']} samples: loss {sft['losses'][0]:.3f} -> {sft['losses'][-1]:.3f}")
            t = time.perf_counter()
            results["sft"] = await evaluate(live, policy, tasks, args.eval, args.max_steps)
            seconds["eval_sft"] = time.perf_counter() - t
            log(f"pi_SFT greedy: {results['sft']}")
            if cache is not None:
                cache.parent.mkdir(parents=True, exist_ok=True)
                save_torch_atomic({"key": sft_key(args), "weights": policy.state_dict(), "eval": results["sft"],
                            "seconds": seconds}, cache)
        pi_sft = copy.deepcopy(policy.state_dict())

        details: dict[str, Any] = {}
        for phase in args.phases.split(","):
            policy.load_state_dict(pi_sft)
            t = time.perf_counter()
            run = run_ppo if phase == "ppo" else run_dpo
            details[phase] = await run(live, policy, args, tasks, log)
            seconds[phase] = time.perf_counter() - t
            t = time.perf_counter()
            results[phase] = await evaluate(live, policy, tasks, args.eval, args.max_steps)
            seconds[f"eval_{phase}"] = time.perf_counter() - t
            log(f"{phase} greedy: {results[phase]}")
            details[phase]["paired"] = {name: paired(results["sft"][name], results[phase][name]) for name in tasks}
            for epoch, res in details[phase].get("after_epoch", {}).items():
                details[phase].setdefault("paired_after_epoch", {})[epoch] = {
                    name: paired(results["sft"][name], res[name]) for name in tasks}
            log(f"{phase} against pi_SFT on the same episodes: {details[phase]['paired']}")
    finally:
        await live.close()
    return {"tasks": tasks, "seed": args.seed, "demos_per_task": args.demos, "eval_episodes": args.eval,
            "success": results, "ppo": details.get("ppo"), "dpo": details.get("dpo"),
            "settings": {k: v for k, v in vars(args).items() if k.startswith(("ppo", "dpo", "vp", "sft"))},
            "seconds": {k: round(v, 1) for k, v in seconds.items()}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", default="click-test-2")
    ap.add_argument("--seed", type=int, default=0, help="seed of the weights, minibatches and training episodes")
    ap.add_argument("--demos", type=int, default=50, help="scripted demonstrations per task (the cold start)")
    ap.add_argument("--sft-epochs", type=int, default=0, help="0: flywheel bc's default for the language policy")
    ap.add_argument("--eval", type=int, default=50, help="unseen greedy episodes per task after each phase")
    ap.add_argument("--max-steps", type=int, default=4)
    ap.add_argument("--phases", default="ppo,dpo", help="each starts from pi_SFT: ppo, dpo or both")
    ap.add_argument("--ppo-updates", type=int, default=10)
    ap.add_argument("--vp-updates", type=int, default=2, help="critic-only batches before PPO (value pretraining)")
    ap.add_argument("--ppo-episodes", type=int, default=16, help="sampled episodes per update (all tasks)")
    ap.add_argument("--ppo-lr", type=float, default=1e-6, help="the main job's rate for the language policy")
    ap.add_argument("--ppo-head-lr-mult", type=float, default=1.0,
                    help="learning rate of the adapter, pointer and value head as a multiple of --ppo-lr")
    ap.add_argument("--ppo-epochs", type=int, default=2)
    ap.add_argument("--ppo-minibatch", type=int, default=8)
    ap.add_argument("--dpo-episodes", type=int, default=60, help="sampled pi_SFT episodes per task to annotate")
    ap.add_argument("--dpo-greedy", action="store_true",
                    help="annotate pi_SFT's greedy failures (the mistakes its evaluation makes), not sampled ones")
    ap.add_argument("--dpo-pairs-cache", default="", help="a file: the DPO phase's pairs are saved there and read "
                    "back by a later run with the same pi_SFT, --dpo-episodes and --dpo-greedy")
    ap.add_argument("--dpo-eval-epochs", default="", help="comma-separated earlier epochs after which the "
                    "policy is also evaluated (e.g. 3 with --dpo-epochs 6)")
    ap.add_argument("--dpo-rounds", type=int, default=1,
                    help="rounds of annotating the current policy's failures and DPO against it (online reflection tuning)")
    ap.add_argument("--dpo-eval-rounds", action="store_true", help="also score the policy after each earlier round")
    ap.add_argument("--dpo-lr", type=float, default=0.0, help="0: flywheel dpo's default for the language policy")
    ap.add_argument("--dpo-head-lr-mult", type=float, default=1.0,
                    help="learning rate of the adapter and pointer as a multiple of the DPO rate")
    ap.add_argument("--dpo-beta", type=float, default=0.1)
    ap.add_argument("--dpo-epochs", type=int, default=3)
    ap.add_argument("--dpo-nll", type=float, default=0.0,
                    help="weight of the chosen side's per-token NLL added to the DPO loss (RPO; 0: plain DPO)")
    ap.add_argument("--dpo-minibatch", type=int, default=32, help="pairs per gradient step (flywheel dpo's default)")
    ap.add_argument("--pretrained", default="smollm2-135m")
    ap.add_argument("--policy", default="", help='JSON merged into the LM config, e.g. \'{"ground": false}\'')
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--sft-cache", default="", help="a file: pi_SFT and its evaluation are saved there, and "
                    "read back by a later run with the same tasks, seed and SFT settings")
    ap.add_argument("--out", default="", help="also write the JSON result here")
    args = ap.parse_args()
    try:
        early = {int(e) for e in args.dpo_eval_epochs.split(",") if e.strip()}
    except ValueError:
        ap.error(f"--dpo-eval-epochs takes comma-separated epoch numbers, got {args.dpo_eval_epochs!r}")
    if not all(1 <= e < args.dpo_epochs for e in early):
        ap.error(f"--dpo-eval-epochs: each epoch must be in 1..{args.dpo_epochs - 1} (the last is always scored)")
    if not 1 <= args.dpo_rounds or args.dpo_rounds * args.dpo_episodes > 1000:
        ap.error(f"--dpo-rounds must be >= 1 with at most 1000 episodes over all rounds (each seed's range), "
                 f"got {args.dpo_rounds} x {args.dpo_episodes}")
    logging.basicConfig(format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("flywheel.dpo").setLevel(logging.INFO)  # a line per DPO epoch: progress on a long phase
    result = asyncio.run(measure(args))
    line = json.dumps(result)
    print(line, flush=True)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(line + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
