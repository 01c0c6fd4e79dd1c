"""The rollout worker's environment steps/s against the bare capacity of the same sandboxes.

    python -m benchmarks.bench_main_loop [--sandboxes 4] [--episodes 48] [--tasks default] [--bare-steps 60]

All in one run, on one machine:
1. bare capacity: N browser sandboxes (one headless Chromium) stepping concurrently with random
   clicks on the run's tasks, nothing else (a new episode's page after each ended one, counted as
   a workload: the worker resets too), total environment steps/s;
2. the main loop: a ``RolloutWorker`` with N sandboxes on a real Kafka broker (infra/kafka/own_broker.py),
   the in-process pixel policy of the main job (the demo's config, random weights) acting on every
   step, ``--episodes`` tasks from flywheel.tasks.v1 to flywheel.steps.v1; steps/s from the first
   episode's start to the last one's end, read back from the steps topic;
3. the ratio, and where a sandbox's time goes in the worker: per step, the policy (waiting for
   its batch included) and the environment (the previous step's screenshot write overlapped in
   it), between steps, episode starts (reset) and ends; the policy's forward passes (batch size,
   ms), and the CPU the worker's process and Chromium used over the loop.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import tempfile
import time
import uuid
from collections import defaultdict
from contextlib import asynccontextmanager
from dataclasses import dataclass

import psutil

from infra.kafka.own_broker import broker_for_benchmarks

from infra.runtime.admin import delete_topics, ensure_topics
from infra.runtime.kafka_clients import read_to_end
from infra.runtime.settings import load_settings
from infra.runtime.topics import TOPICS, topic_name
from producers.policy_client import TorchClient
from producers.rollout import RolloutConfig, RolloutWorker
from producers.sandboxes.browser import BrowserSandbox
from producers.sandboxes.browser_host import BrowserHost
from producers.suites import hotkeys, plan
from producers.tasks import build_tasks, submit
from producers.bare_loop import bare_sandbox, load_pages
from schemas.blobs import BlobStore
from schemas.codec import decode
from schemas.events import EpisodeEvent, EpisodeStarted, Step
from trainer.policies.pixel.config import pixel_config


# ---------------------------------------------------------------- 1. bare capacity


@dataclass
class Bare:
    steps_per_s: float
    steps_per_episode: float


@asynccontextmanager
async def started_sandboxes(n: int, prefix: str):
    """``n`` started browser sandboxes on one browser host, blobs in a fresh temporary folder;
    closed on exit."""
    host = BrowserHost()
    blobs = BlobStore(tempfile.mkdtemp(prefix=prefix))
    boxes = [BrowserSandbox(blobs, host=host, defer_writes=True) for _ in range(n)]
    try:
        for sb in boxes:
            await sb.start()
        yield boxes
    finally:
        for sb in boxes:
            await sb.close()
        await host.close()


async def bare_capacity(n: int, tasks: list, steps: int, episode_steps: int = 0) -> Bare:
    async with started_sandboxes(n, "bench-bare-blobs-") as boxes:
        # every task page loaded first, as in a main job past its first minutes: a short loop that
        # resets often would otherwise time mostly first loads (groups-dm, docs/performance.md)
        await asyncio.gather(*(load_pages(sb, tasks) for sb in boxes))
        await asyncio.gather(*(bare_sandbox(sb, tasks, 5, random.Random(100 + i)) for i, sb in enumerate(boxes)))
        t0 = time.perf_counter()
        done = await asyncio.gather(*(bare_sandbox(sb, tasks, steps, random.Random(i), episode_steps)
                                      for i, sb in enumerate(boxes)))
        seconds = time.perf_counter() - t0
        return Bare(sum(s for s, _ in done) / seconds, sum(s for s, _ in done) / sum(e for _, e in done))


# ---------------------------------------------------------------- 2. the main loop


class ForwardTimer:
    """Wraps a policy's ``act``: batch sizes and seconds of every forward pass."""

    def __init__(self, policy) -> None:
        self.act, self.batches, self.seconds = policy.act, [], []
        policy.act = self

    def __call__(self, inputs, greedy=False, *rest):
        t0 = time.perf_counter()
        out = self.act(inputs, greedy, *rest)
        self.seconds.append(time.perf_counter() - t0)
        self.batches.append(len(inputs))
        return out


class ProcessCPU:
    """CPU seconds of this process and of its children (Playwright's driver, Chromium), sampled
    while they live: the browser is gone by the time the worker returns."""

    def __init__(self) -> None:
        self.me, self.seen, self.names = psutil.Process(), {}, {}

    def sample(self) -> None:
        for p in [self.me, *self.me.children(recursive=True)]:
            try:
                t = p.cpu_times()
                self.seen[p.pid] = t.user + t.system
                self.names.setdefault(p.pid, "worker (python)" if p.pid == self.me.pid else p.name())
            except psutil.Error:
                pass

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            self.sample()
            await asyncio.sleep(0.25)

    def by_name(self, since: dict[int, float]) -> dict[str, float]:
        out: dict[str, float] = defaultdict(float)
        for pid, cpu in self.seen.items():
            name = self.names[pid]
            out["worker (python)" if name == "worker (python)" else
                "chromium" if "chrom" in name.lower() or "headless" in name.lower() else name] += cpu - since.get(pid, 0.0)
        return dict(out)


async def main_loop(settings, n: int, tasks: list, action_types: tuple[str, ...], threads: int,
                    max_pages: int | None) -> dict:
    client = TorchClient("bench-pixel", kind="pixel", config=pixel_config(action_types, keys=hotkeys()), threads=threads)
    timer = ForwardTimer(client.policy)
    cfg = RolloutConfig(sandboxes=n, policy_backend="torch", policy_name="bench-pixel", group_id=f"bench-{uuid.uuid4().hex[:8]}",
                        idle_exit_s=3.0, reload=False, max_tasks=len(tasks), status_interval_s=5.0)
    options = None if max_pages is None else {"browser": {"step_ms": cfg.step_ms, "defer_writes": True,
                                                          "max_pages": max_pages}}
    worker = RolloutWorker(cfg, settings, client, "bench-worker", sandbox_options=options)
    submit(settings, tasks)
    cpu, stop = ProcessCPU(), asyncio.Event()
    cpu.sample()
    since = dict(cpu.seen)
    sampler = asyncio.create_task(cpu.run(stop))
    t0 = time.perf_counter()
    rc = await worker.run()
    wall = time.perf_counter() - t0
    stop.set()
    await sampler
    cpu.sample()
    if rc != 0:
        raise SystemExit(f"the rollout worker failed: {worker.fatal}")
    events = [decode(m.value(), EpisodeEvent) for m in read_to_end(settings, topic_name(TOPICS.steps, settings))]
    return {"events": events, "timer": timer, "wall": wall, "cpu": cpu.by_name(since)}


def breakdown(events: list, n: int) -> dict:
    """Where each sandbox's time went, from the events' own timestamps (seconds)."""
    by_ep: dict[str, list] = defaultdict(list)
    for e in events:
        by_ep[e.episode_id].append(e)
    t = defaultdict(float)
    steps: list[Step] = []
    first = min(e.ts for e in events if isinstance(e, EpisodeStarted))
    last = max(e.ts for e in events)
    for evs in by_ep.values():
        start, end = evs[0], evs[-1]
        ep_steps = [e for e in evs if isinstance(e, Step)]
        steps += ep_steps
        if not ep_steps:
            t["reset"] += end.ts - start.ts
            continue
        t["reset"] += ep_steps[0].started_at - start.ts
        for a, b in zip(ep_steps, ep_steps[1:]):
            t["between"] += b.started_at - a.ts
        t["end"] += end.ts - ep_steps[-1].ts
        for s in ep_steps:
            t["policy"] += s.latency_policy_ms / 1000
            t["env"] += s.latency_env_ms / 1000
            t["in_step_other"] += (s.ts - s.started_at) - (s.latency_policy_ms + s.latency_env_ms) / 1000
    wall = last - first
    t["idle"] = n * wall - sum(t.values())  # a slot without an episode (waiting for a task, settling)
    return {"wall": wall, "first": first, "steps": steps, "t": dict(t), "episodes": len(by_ep)}


def pct(xs: list[float], q: float) -> float:
    return statistics.quantiles(xs, n=100)[int(q) - 1] if len(xs) > 1 else (xs[0] if xs else 0.0)


VARIANTS = {
    # as the worker ran before issue 29: torch's own thread count (one per core), 4 pages per sandbox
    "before": {"threads": os.cpu_count() or 1, "max_pages": 4},
    "now": {"threads": 1, "max_pages": None},  # the worker's and the torch client's defaults
}


def report(name: str, got: dict, n: int, bare: float) -> None:
    b = breakdown(got["events"], n)
    steps, t, wall = b["steps"], b["t"], b["wall"]
    rate = len(steps) / wall
    # the second half of the run: each sandbox has loaded most of the tasks' pages by then
    mid, end = b["first"] + wall / 2, b["first"] + wall
    late = sum(1 for s in steps if s.ts >= mid) / (end - mid)
    print(f"[{name}] main loop: rollout worker, {n} sandboxes, pixel policy in process (random weights): "
          f"{len(steps)} steps in {b['episodes']} episodes in {wall:.1f}s = {rate:6.1f} env steps/s"
          f" | main loop / bare capacity {rate / bare:.2f} (target >= 0.5); second half of the run "
          f"{late:6.1f} env steps/s, {late / bare:.2f}")
    pol, env = [s.latency_policy_ms for s in steps], [s.latency_env_ms for s in steps]
    print(f"[{name}] per step (ms): policy p50 {pct(pol, 50):.0f} p90 {pct(pol, 90):.0f} | "
          f"env p50 {pct(env, 50):.0f} p90 {pct(env, 90):.0f}")
    total = n * wall
    print(f"[{name}] sandbox time ({n} x {wall:.1f}s), ms per step and share:")
    for k in ("policy", "env", "in_step_other", "between", "reset", "end", "idle"):
        print(f"[{name}]   {k:14s} {1000 * t.get(k, 0.0) / max(len(steps), 1):7.1f}  {t.get(k, 0.0) / total:6.1%}")
    timer = got["timer"]
    if timer.batches:
        print(f"[{name}] policy forward passes: {len(timer.batches)}, batch size mean {statistics.mean(timer.batches):.2f} "
              f"(max {max(timer.batches)}), {1000 * statistics.mean(timer.seconds):.0f} ms each, "
              f"{sum(timer.seconds) / got['wall']:.0%} of the worker's wall time")
    shares = ", ".join(f"{k} {v / got['wall']:.2f}" for k, v in sorted(got["cpu"].items(), key=lambda kv: -kv[1]) if v > 0.05)
    print(f"[{name}] CPU over the worker's {got['wall']:.1f}s, in cores: {shares} "
          f"(machine: {psutil.cpu_count()} cores, load {os.getloadavg()[0]:.1f})", flush=True)


async def run(args) -> None:
    runplan = plan(args.tasks.split(","), args.max_steps)
    tasks = build_tasks("miniwob", list(runplan.tasks), max(1, args.episodes // len(runplan.tasks) + 1),
                        max_steps=runplan.max_steps, prefix=f"bench{uuid.uuid4().hex[:6]}.")[:args.episodes]
    n = args.sandboxes
    bare = [(await bare_capacity(n, tasks, args.bare_steps)).steps_per_s]
    print(f"bare capacity: {n} sandboxes, random clicks on {len(runplan.tasks)} tasks: {bare[0]:6.1f} env steps/s", flush=True)
    results = {}
    with broker_for_benchmarks() as bootstrap:
        for name in args.variants.split(","):
            settings = load_settings({"data_dir": tempfile.mkdtemp(prefix="bench-main-loop-"), "kafka_bootstrap": bootstrap,
                                      "topic_prefix": f"b{uuid.uuid4().hex[:8]}."})
            created = ensure_topics(settings).created
            try:
                results[name] = await main_loop(settings, n, tasks, runplan.action_types, **VARIANTS[name])
            finally:
                delete_topics(settings, created)
    bare.append((await bare_capacity(n, tasks, args.bare_steps)).steps_per_s)
    capacity = statistics.mean(bare)
    print(f"bare capacity again: {bare[1]:6.1f} env steps/s; the ratios below use the mean, {capacity:.1f}")
    for name, got in results.items():
        report(name, got, n, capacity)


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sandboxes", type=int, default=4, help="sandboxes of the bare loop and of the worker")
    p.add_argument("--episodes", type=int, default=48, help="tasks the worker runs")
    p.add_argument("--tasks", default="default", help="suite or task names, comma-separated")
    p.add_argument("--max-steps", type=int, default=0, help="step budget per episode (0: the suite's)")
    p.add_argument("--bare-steps", type=int, default=60, help="steps per sandbox of the bare loop")
    p.add_argument("--variants", default="before,now", help=f"worker settings to run, in order: {', '.join(VARIANTS)}")
    asyncio.run(run(p.parse_args()))
