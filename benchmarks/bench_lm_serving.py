"""LM policy update time per batch, and policy-server requests/s with vs without batching.

Run: python -m benchmarks.bench_lm_serving [--trajectories 8] [--requests 32] [--concurrency 8]
Everything on the tiny LM config (hidden 64, 2 layers, byte tokenizer) on CPU:
1. SFT update (trainer.sft.lm_stream.train_step) over a batch of 2-step trajectories, and one
   PPO-style token-level pass (evaluate + backward) over the same decisions;
2. the HTTP server (trainer.serving.server) on a local port, the same chat requests sent with
   ``--concurrency`` in flight, once with max_batch=8 and once with max_batch=1, in this run.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from functools import partial

import numpy as np
import torch

from tests.serving_fixtures import scored_trajectory  # test support: run from the checkout's root

from schemas.blobs import BlobStore
from trainer.core import metric_names as M
from trainer.sft.lm_stream import LMTrainConfig, train_step
from trainer.serving.openai_chat import encode_image
from infra.runtime.policy import build_policy, screen
from trainer.serving.reload import PolicyHolder
from trainer.serving.server import PolicyServer, ServeConfig
from trainer.sft.sft_samples import sft_samples
from infra.runtime.procs import free_port


def bench_updates(n_traj: int, repeats: int) -> None:
    store = BlobStore(tempfile.mkdtemp())
    load = partial(screen, store)
    policy = build_policy("lm", "bench", {})
    samples = [s for i in range(n_traj) for s in sft_samples(policy, scored_trajectory(store, f"e{i}", 2, i), load)]
    opt = torch.optim.AdamW(policy.parameters(), lr=1e-4)
    cfg = LMTrainConfig(minibatch_samples=8)
    train_step(policy, opt, samples, cfg)  # warm-up
    sft = [train_step(policy, opt, samples, cfg)[M.UPDATE_TIME_S] for _ in range(repeats)]
    ppo = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        policy.train()
        for i in range(0, len(samples), 8):
            batch = policy.make_batch(samples[i:i + 8])
            logprobs, values, entropy = policy.evaluate_tokens(batch)
            (-(logprobs.sum()) + values.pow(2).sum() - 0.01 * entropy.sum()).backward()
        opt.step()
        opt.zero_grad()
        ppo.append(time.perf_counter() - t0)
    tokens = sum(len(s.ids) for s in samples)
    print(f"LM update, {n_traj} trajectories = {len(samples)} decisions, {tokens} tokens per batch:")
    print(f"  SFT step  median {statistics.median(sft) * 1000:.0f} ms per batch ({repeats} runs)")
    print(f"  PPO pass  median {statistics.median(ppo) * 1000:.0f} ms per batch (evaluate + backward + step)")


async def requests_per_s(max_batch: int, n: int, concurrency: int, max_tokens: int) -> tuple[float, float]:
    import aiohttp
    from aiohttp import web

    holder = PolicyHolder("bench")
    holder.swap(build_policy("lm", "bench", {}), None)
    server = PolicyServer(holder, ServeConfig(max_batch=max_batch, max_wait_ms=5.0))
    runner = web.AppRunner(server.app())
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    img = encode_image(np.random.default_rng(0).integers(0, 255, (80, 100, 3), dtype=np.uint8))
    body = {"logprobs": True, "max_tokens": max_tokens, "messages": [{"role": "user", "content": [
        {"type": "text", "text": "Click the OK button."}, {"type": "image_url", "image_url": {"url": img}}]}]}
    sem = asyncio.Semaphore(concurrency)
    async with aiohttp.ClientSession() as session:
        async def one():
            async with sem, session.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=body) as r:
                assert r.status == 200, await r.text()
                await r.read()
        await one()  # warm-up
        t0 = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(n)))
        elapsed = time.perf_counter() - t0
    mean_batch = server.chat.stats.mean_batch
    await runner.cleanup()
    return n / elapsed, mean_batch


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trajectories", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=32)
    args = ap.parse_args()
    print(f"torch threads {torch.get_num_threads()}")
    bench_updates(args.trajectories, args.repeats)
    batched, mb = asyncio.run(requests_per_s(8, args.requests, args.concurrency, args.max_tokens))
    single, _ = asyncio.run(requests_per_s(1, args.requests, args.concurrency, args.max_tokens))
    print(f"server, {args.requests} chat requests of {args.max_tokens} tokens, {args.concurrency} in flight:")
    print(f"  batched (max_batch=8): {batched:.2f} req/s, mean batch {mb:.1f}")
    print(f"  unbatched (max_batch=1): {single:.2f} req/s")
    print(f"  ratio batched/unbatched: {batched / single:.2f}x")


if __name__ == "__main__":
    main()
