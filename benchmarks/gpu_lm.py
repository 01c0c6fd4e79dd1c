"""The language policy on a GPU: vLLM serving the exported policy, and the learner's phases.

Run on a machine with CUDA: python -m benchmarks.gpu_lm [--parts vllm,torch,learner] [--out DIR]
Figures measured on an H100: docs/language-policy.md ("Measured on a GPU", "The learner on a GPU").

vllm (needs vLLM), torch: what `flywheel serve --backend vllm` runs, without the broker around it.
  A text-only SmolLM2-135M policy (max_images 0, the form vLLM can serve exactly, see
  trainer.serving.vllm_backend) whose weights differ from the checkpoint's (final norm scaled by 1.05) is
  published to a blob store, exported by ``export_hf_folder`` and served by ``VllmProcess``.
  Chat requests are the rollout worker's (``producers.policy_client.chat_request``).
  1. Exactness: greedy replies of vLLM and of the torch policy on the GPU are compared text for
     text; every reply (greedy and sampled) is re-scored by the torch policy in the trainer's
     context (``response_logprobs``): token ids must match, and the per-token log-prob gap is
     reported (the PPO ratio's error at its first step).
  2. Throughput: the same sampled requests with ``--concurrency`` in flight, to vLLM and to the
     torch server (trainer.serving.server, dynamic batching) on the same GPU.
learner: time of the learner's phases for the main job's language policy (screenshots, pointer),
  on the GPU and on ``--cpu-threads`` CPU threads (this project's 2-core machine), same inputs:
  sampled acting for ``--episodes`` one-step episodes (``act``), one PPO update on them
  (``ppo_update``, by default ``flywheel train``'s 8 epochs and minibatches of 64 steps), one SFT
  epoch on ``--demos`` demonstrations (``lm_train``) and one DPO epoch on an error-correction pair
  per episode (``dpo_train`` as ``learn_lm_phases.py`` runs it: minibatches of 4, NLL weight 1,
  the reference's log-probs included). The steps trained on are scripted clicks on random
  160 x 210 screenshots, the same text on every device, each with its behaviour log-prob under
  the policy. ``--random-weights`` times a model of the checkpoint's architecture with random
  weights, for a machine the weights cannot be carried to: the times depend on the shapes, not
  on the values, except sampling (a random model writes ``max_new_tokens`` tokens).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import torch

INSTRUCTIONS = ["Click on the \"ONE\" button.", "Enter \"Kasey\" into the text field and press Submit.",
                "Select Nathalie from the list and click Submit.", "Click on the tab #2.",
                "Expand the sections below, to find and click on the link \"egestas\".",
                "Click button ONE, then click button TWO.", "Type \"blue\" in the box.", "Click the OK button."]


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ---------------------------------------------------------------- serve


def text_version(tmp: Path):
    from infra.runtime.policy import build_policy
    from schemas.blobs import BlobStore
    from trainer.policies.lm.model import pretrained_lm_config
    from trainer.core.publish import make_version, save_weights

    policy = build_policy("lm", "smol-text", pretrained_lm_config(max_images=0, pointer=False))
    with torch.no_grad():  # a version of our own: vLLM cannot be serving a checkpoint found elsewhere
        policy.lm.model.norm.weight.mul_(1.05)
    store = BlobStore(str(tmp / "blobs"))
    return policy, make_version(policy, save_weights(policy, store), None), store


def bodies(pv, n: int, temperature: float, max_tokens: int) -> list[dict[str, Any]]:
    from producers.policy_client import chat_request
    from schemas.prompt import PromptSpec

    spec, png = PromptSpec.from_config(pv.config), b""
    return [chat_request(pv.policy, spec, INSTRUCTIONS[i % len(INSTRUCTIONS)] + f" (request {i})", png, [], [],
                         temperature=temperature, max_tokens=max_tokens) for i in range(n)]


async def post_all(url: str, reqs: list[dict], concurrency: int) -> tuple[list[dict], float]:
    import aiohttp

    sem, out = asyncio.Semaphore(concurrency), [None] * len(reqs)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as session:
        async def one(i):
            async with sem, session.post(url + "/v1/chat/completions", json=reqs[i]) as r:
                text = await r.text()
                if r.status != 200:
                    raise RuntimeError(f"HTTP {r.status}: {text[:300]}")
                out[i] = json.loads(text)
        t0 = time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(len(reqs))))
        return out, time.perf_counter() - t0


def reply_tokens(body: dict) -> tuple[str, list[int], list[float]]:
    choice = body["choices"][0]
    content = (choice.get("logprobs") or {}).get("content") or []
    ids = [int(t["token"].split(":", 1)[1]) for t in content]  # return_tokens_as_token_ids: "token_id:123"
    return choice["message"]["content"] or "", ids, [float(t["logprob"]) for t in content]


def compare(policy, pv, reqs: list[dict], replies: list[dict]) -> dict[str, Any]:
    """Re-score each vLLM reply with the torch policy in the trainer's context."""
    from infra.runtime.policy import PolicyInput
    from schemas.prompt import IM_END

    eos = policy.tok.special(IM_END)
    gaps, seq_gaps, id_mismatch, cut, texts = [], [], 0, 0, []
    for req, body in zip(reqs, replies):
        text, ids, lps = reply_tokens(body)
        cut += body["choices"][0].get("finish_reason") == "length"
        instruction = req["_instruction"]
        turns = policy.context(PolicyInput(np.zeros((4, 4, 3), np.uint8), instruction, 160, 210))
        with torch.no_grad():
            (tids, tlps), = policy.response_logprobs([turns], [text])
        if ids and ids[-1] != eos:  # cut by max_tokens: the trainer's answer adds an <|im_end|> vLLM never
            tids, tlps = tids[:len(ids)], tlps[:len(ids)]  # sampled; compared here: the tokens both have
        if tids != ids:
            id_mismatch += 1
            continue
        d = [abs(a - b) for a, b in zip(lps, tlps)]
        gaps += d
        seq_gaps.append(abs(sum(lps) - sum(tlps)))
        texts.append(text)
    return {"replies": len(replies), "cut_at_max_tokens": cut, "token_id_mismatch": id_mismatch, "tokens": len(gaps),
            "max_token_logprob_gap": max(gaps) if gaps else None,
            "mean_token_logprob_gap": statistics.fmean(gaps) if gaps else None,
            "max_sequence_logprob_gap": max(seq_gaps) if seq_gaps else None, "example": texts[:2]}


def torch_greedy(policy, instructions: list[str], max_tokens: int) -> list[str]:
    from infra.runtime.policy import PolicyInput

    ctx = [policy.render(policy.context(PolicyInput(np.zeros((4, 4, 3), np.uint8), s, 160, 210))) for s in instructions]
    with torch.no_grad():
        return [g.text for g in policy.generate(ctx, greedy=True, max_new_tokens=max_tokens)]


def wait_up(url: str, timeout_s: float, proc) -> float:
    t0 = time.time()
    while time.time() - t0 < timeout_s:
        if proc.proc is not None and proc.proc.poll() is not None:
            raise RuntimeError(f"vLLM exited with {proc.proc.returncode}")
        try:
            with urllib.request.urlopen(url + "/v1/models", timeout=2):
                return time.time() - t0
        except OSError:
            time.sleep(1.0)
    raise RuntimeError(f"vLLM not up after {timeout_s:.0f} s")


async def torch_server_rate(policy, reqs: list[dict], concurrency: int, max_batch: int) -> float:
    import socket

    from aiohttp import web

    from trainer.serving.reload import PolicyHolder
    from trainer.serving.server import PolicyServer, ServeConfig

    holder = PolicyHolder(policy.name)
    holder.swap(policy, None)
    server = PolicyServer(holder, ServeConfig(policy=policy.name, max_batch=max_batch, device="cuda"))
    runner = web.AppRunner(server.app())
    await runner.setup()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        await post_all(f"http://127.0.0.1:{port}", reqs[:2], 2)  # warm-up
        _, seconds = await post_all(f"http://127.0.0.1:{port}", reqs, concurrency)
    finally:
        await runner.cleanup()
    return len(reqs) / seconds


def serve_part(args, out: dict) -> None:
    from trainer.serving.vllm_backend import export_hf_folder, vllm_available

    reason = vllm_available() if "vllm" in args.parts.split(",") else None
    tmp = Path(tempfile.mkdtemp())
    policy, pv, store = text_version(tmp)
    policy.to("cuda").eval()
    t0 = time.time()
    folder = export_hf_folder(pv, store, tmp / "vllm" / "v0")
    res: dict[str, Any] = {"export_s": round(time.time() - t0, 1), "requests": args.requests,
                           "concurrency": args.concurrency, "max_tokens": args.max_tokens}
    out["serve"] = res
    if reason:
        res["vllm"] = {"skipped": reason}
        log(f"vllm: skipped ({reason})")
    for extra in args.vllm_args.split("|") if "vllm" in args.parts.split(",") and not reason else []:
        try:
            res[f"vllm {extra}"] = serve_vllm_once(args, policy, pv, folder, extra.split())
        except Exception as exc:  # noqa: BLE001 - the report says which configuration failed and why
            res[f"vllm {extra}"] = {"failed": repr(exc)[:500]}
        log(f"vllm {extra}: {res[f'vllm {extra}']}")
    reqs = bodies(pv, args.requests, 1.0, args.max_tokens)
    for mb in (1, args.max_batch) if "torch" in args.parts.split(",") else ():
        rate = asyncio.run(torch_server_rate(policy, reqs, args.concurrency, mb))
        res[f"torch_server_req_per_s_max_batch_{mb}"] = round(rate, 2)
    shutil.rmtree(tmp, ignore_errors=True)  # the export is half a gigabyte
    log(f"serve: {res}")


def serve_vllm_once(args, policy, pv, folder: Path, extra: list[str]) -> dict[str, Any]:
    from trainer.serving.vllm_backend import VllmProcess

    res: dict[str, Any] = {}
    proc = VllmProcess(pv.policy, "127.0.0.1", args.port, extra_args=extra, dtype="auto")  # args may name one
    url = f"http://127.0.0.1:{args.port}"
    proc.restart(folder)
    try:
        res["startup_s"] = round(wait_up(url, args.startup_timeout, proc), 1)
        log(f"vLLM up in {res['startup_s']} s")
        for name, temp in (("greedy", 0.0), ("sampled", 1.0)):
            reqs = bodies(pv, args.check_requests, temp, args.max_tokens)
            for i, r in enumerate(reqs):
                r["return_tokens_as_token_ids"] = True
                r["_instruction"] = INSTRUCTIONS[i % len(INSTRUCTIONS)] + f" (request {i})"
            send = [{k: v for k, v in r.items() if k != "_instruction"} for r in reqs]
            replies, _ = asyncio.run(post_all(url, send, args.concurrency))
            res[name] = compare(policy, pv, reqs, replies)
            if name == "greedy":
                mine = torch_greedy(policy, [r["_instruction"] for r in reqs], args.max_tokens)
                theirs = [reply_tokens(b)[0] for b in replies]
                res[name]["same_text_as_torch"] = sum(a == b for a, b in zip(mine, theirs))
        reqs = bodies(pv, args.requests, 1.0, args.max_tokens)
        asyncio.run(post_all(url, reqs[:4], 4))  # warm-up
        replies, seconds = asyncio.run(post_all(url, reqs, args.concurrency))
        tokens = sum(len((b["choices"][0].get("logprobs") or {}).get("content") or []) for b in replies)
        res["req_per_s"] = round(len(reqs) / seconds, 2)
        res["tokens_per_s"] = round(tokens / seconds, 1)
    finally:
        proc.stop()
    return res


# ---------------------------------------------------------------- learner


def random_weights(folder: str, seed: int) -> str:
    """A copy of the Hugging Face folder ``folder`` (its config and tokenizer) with random weights
    of its architecture: where the checkpoint's weights cannot travel, the learner's times are the
    same (they depend on the shapes, not the values; the replies it times are scripted)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    out = Path(tempfile.mkdtemp()) / Path(folder).name
    shutil.copytree(folder, out, ignore=shutil.ignore_patterns("*.safetensors", "*.bin", "flywheel-manifest.json"))
    torch.manual_seed(seed)
    AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(out)).save_pretrained(out)
    return str(out)


def scripted(policy, inputs, k: int) -> tuple[Any, str]:
    """Input k's click and the text a UI-TARS policy writes for it: the same on every device
    (a policy's own samples differ between devices, and a random one's do not parse)."""
    from schemas import actions as A
    from schemas.uitars import render_output

    click = A.Click(x=0.1 + 0.8 * ((k * 37) % 100) / 100, y=0.1 + 0.8 * ((k * 61) % 100) / 100)
    inp = inputs[k]
    return click, render_output(f"the target of request {k}", click, inp.screen_width, inp.screen_height, policy.config["coord_mode"])


def episodes(policy, n: int, seed: int):
    """``n`` one-step scored trajectories on random screenshots, each step a scripted click with its
    behaviour log-prob under ``policy``; and the time of ``policy.act`` sampling on the same inputs."""
    from PIL import Image

    from infra.runtime.policy import PolicyInput
    from schemas.blobs import BlobStore
    from schemas.events import Observation, ScoredTrajectory, Step, TaskSpec, Trajectory

    store = BlobStore(tempfile.mkdtemp())
    rng = np.random.default_rng(seed)
    images = [rng.integers(0, 255, (210, 160, 3), dtype=np.uint8) for _ in range(n)]
    inputs = [PolicyInput(im, INSTRUCTIONS[i % len(INSTRUCTIONS)], 160, 210) for i, im in enumerate(images)]
    t0 = time.perf_counter()
    with torch.no_grad():
        decisions = policy.act(inputs)
    act_s = time.perf_counter() - t0
    actions = [scripted(policy, inputs, i) for i in range(n)]
    with torch.no_grad():
        scored_lp = policy.response_logprobs([policy.context(i) for i in inputs], [t for _, t in actions])
    out = []
    for i, (im, (click, text), (_, lps)) in enumerate(zip(images, actions, scored_lp)):
        ref = store.put_image(Image.fromarray(im))
        obs = Observation(screenshot=ref, screen_width=160, screen_height=210, instruction=inputs[i].instruction)
        win = i % 2 == 0
        step = Step(episode_id=f"e{i}", ts=1.0, step_index=0, started_at=1.0, observation=obs,
                    thought=text.split("\n")[0].removeprefix("Thought: "), action=click, raw_output=text,
                    policy=policy.name, policy_version=0, logprob=float(sum(lps)), reward=float(win), done=True)
        task = TaskSpec(task_id=f"t{i}", suite="miniwob", name="click-test-2", submitted_at=1.0)
        traj = Trajectory(episode_id=f"e{i}", task=task, sandbox="browser", worker_id="w", policy=policy.name,
                          steps=[step], status="ended", outcome_reward=float(win), success=win, started_at=1.0,
                          ended_at=2.0)
        out.append(ScoredTrajectory(trajectory=traj, scorer="rule-v1", scorer_version="1", reward=float(win),
                                    components={"outcome": float(win)}, verdict=int(win), rl_eligible=True,
                                    routes=["rl"], scored_at=3.0))
    cut = sum(d.action is None for d in decisions)  # replies that did not parse (a random model's)
    return out, store, act_s, cut


def pairs_of(policy, scored, store):
    """An error-correction pair per episode: its scripted click (chosen) against the next one's
    (rejected), on its screenshot: what `flywheel dpo` trains on."""
    from schemas.events import PairSide, PreferencePair
    from trainer.policies.lm.pairs import lm_pairs

    steps = [s.trajectory.steps[0] for s in scored]
    out = []
    for k, st in enumerate(steps):
        other = steps[(k + 1) % len(steps)]
        out.append(PreferencePair(episode_id=st.episode_id, kind="error_correction", task=scored[k].trajectory.task,
                                  tau=0, step_index=0, observation=st.observation, history=[],
                                  chosen=PairSide(action=st.action, thought=st.thought),
                                  rejected=PairSide(action=other.action, thought=st.thought, raw_output=""),
                                  annotator="bench", policy=policy.name, policy_version=0, created_at=1.0))
    data, skipped = lm_pairs(policy, out, store)
    return data, dict(skipped)


def time_learner(device: str, threads: int, args, pretrained: str) -> dict[str, Any]:
    from infra.runtime.policy import build_policy
    from trainer.policies.lm.bc import lm_examples, lm_train
    from trainer.rl.config import TrainConfig
    from trainer.dpo.train import dpo_train, reference_logprobs
    from trainer.dpo.config import DPOConfig
    from trainer.policies.lm.model import pretrained_lm_config
    from trainer.rl.intake import to_episode
    from trainer.core import metric_names as M
    from trainer.rl.update import collate, make_optimizer, ppo_update

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    policy = build_policy("lm", "bench", pretrained_lm_config(pretrained=pretrained)).to(device).eval()
    scored, store, act_s, _ = episodes(policy, args.episodes, 0)
    scored, store, act2_s, cut = episodes(policy, args.episodes, 1)  # the first call pays for warm-up
    eps = [to_episode(s, policy, store) for s in scored]
    cfg = TrainConfig(policy_kind="lm", lr=1e-6, seed=0, epochs=args.ppo_epochs,
                      minibatch_size=args.ppo_minibatch).validate()
    opt = make_optimizer(policy, cfg.lr, cfg.head_lr_mult)
    stats = ppo_update(policy, opt, collate(eps), cfg, generator=torch.Generator().manual_seed(0))
    demos = (scored * ((args.demos + len(scored) - 1) // len(scored)))[:args.demos]
    samples, _ = lm_examples(policy, demos, store, 0, 0.0, 0)
    t0 = time.perf_counter()
    lm_train(policy, samples, 1, 1e-5, 16, 4, 0)
    sft_s = time.perf_counter() - t0
    data, skipped = pairs_of(policy, scored, store)
    dcfg = DPOConfig(minibatch_size=args.dpo_minibatch, nll_weight=1.0).validate()
    t0 = time.perf_counter()
    ref_c, ref_r = reference_logprobs(policy, data)
    dpo_train(policy, data, ref_c, ref_r, dcfg.beta, 1, dcfg.learning_rate("lm"), dcfg.minibatch_size, 0,
              dcfg.passes("lm"), 1.0, dcfg.nll_weight)
    dpo_s = time.perf_counter() - t0
    return {"act_sampled_s": round(min(act_s, act2_s), 2), "act_unparsed": cut,
            "ppo_update_s": round(stats[M.UPDATE_TIME_S], 2), "ppo_episodes": len(eps),
            "sft_epoch_s": round(sft_s, 2), "sft_samples": len(samples),
            "dpo_epoch_s": round(dpo_s, 2), "dpo_pairs": len(data), "dpo_skipped": skipped}


def learner_part(args, out: dict) -> None:
    res: dict[str, Any] = {"pretrained": args.pretrained}
    pretrained = random_weights(args.pretrained, 0) if args.random_weights else args.pretrained
    if args.random_weights:
        res["weights"] = "random, of the checkpoint's architecture (--random-weights)"
    for device, threads in (("cuda", torch.get_num_threads()), ("cpu", args.cpu_threads)):
        if device == "cuda" and not torch.cuda.is_available():
            res[device] = {"skipped": "no CUDA device"}
            continue
        log(f"learner on {device} ({threads} threads)")
        res[device] = time_learner(device, threads, args, pretrained)
        log(f"  {res[device]}")
    if "act_sampled_s" in res.get("cuda", {}):
        res["speedup"] = {k: round(res["cpu"][k] / max(res["cuda"][k], 1e-9), 1)
                          for k in ("act_sampled_s", "ppo_update_s", "sft_epoch_s", "dpo_epoch_s")}
    out["learner"] = res
    log(f"learner: {json.dumps(res)}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--parts", default="vllm,torch,learner",
                    help="vllm: vLLM serving; torch: the torch server on the GPU; learner: phase times")
    ap.add_argument("--check-requests", type=int, default=32, help="replies checked token by token per mode")
    ap.add_argument("--requests", type=int, default=256, help="sampled requests timed per server")
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--max-tokens", type=int, default=48, help="the main job's max_new_tokens")
    ap.add_argument("--max-batch", type=int, default=32, help="the torch server's largest batch")
    ap.add_argument("--port", type=int, default=8011)
    ap.add_argument("--vllm-args", default="--gpu-memory-utilization 0.4 --max-model-len 2048|"
                    "--dtype float32 --gpu-memory-utilization 0.4 --max-model-len 2048",
                    help="extra vLLM arguments; '|' separates configurations measured one after the other")
    ap.add_argument("--startup-timeout", type=float, default=420)
    ap.add_argument("--episodes", type=int, default=16)
    ap.add_argument("--demos", type=int, default=48)
    ap.add_argument("--cpu-threads", type=int, default=2)
    ap.add_argument("--ppo-epochs", type=int, default=8, help="flywheel train's default; the demo's is 2")
    ap.add_argument("--ppo-minibatch", type=int, default=64, help="flywheel train's default; the demo's is 8")
    ap.add_argument("--dpo-minibatch", type=int, default=4, help="pairs per DPO step (learn_lm_phases.py's runs)")
    ap.add_argument("--pretrained", default="smollm2-135m", help="the learner's checkpoint: a named one or a local folder")
    ap.add_argument("--random-weights", action="store_true",
                    help="the learner part uses random weights of --pretrained's architecture (a folder with its "
                         "config and tokenizer): for a machine the weights cannot be carried to")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    out: dict[str, Any] = {"device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
                           "torch": torch.__version__, "args": vars(args)}
    parts = args.parts.split(",")
    try:
        if "vllm" in parts or "torch" in parts:
            serve_part(args, out)
        if "learner" in parts:
            learner_part(args, out)
    finally:
        text = json.dumps(out, indent=1)
        print(text)
        if args.out:
            Path(args.out).write_text(text)
    failed = [k for k, v in out.get("serve", {}).items() if k.startswith("vllm ") and "failed" in v]
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
