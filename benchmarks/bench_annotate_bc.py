"""Demonstrations recorded through the Annotate view -> `flywheel bc` -> success against random.

Playwright plays a person in `flywheel ui`'s Annotate view (the app in process, a real Chromium
page): ``--demos`` episodes of ``--task`` (default click-dialog, a task without a scripted
solver: the person reads the live task page for the dialog's close button and clicks it on
the shown screen). The demonstrations go the whole way: flywheel.steps.v1 under
``human:bench``, `flywheel streams` (started here) scores them and routes them to
flywheel.sft.v1, then `flywheel bc --demos-from human` clones them into a pixel policy (the
quick suite's click head). pi_sft (greedy) and the random policy (uniform clicks) then each play
``--eval`` unseen seeds of the task with a step budget of ``--max-steps``, through the rollouts'
own episode loop. Prints each annotation action's round trip in the page (request until the new
screen is decoded) and both success rates, as JSON.

    python -m benchmarks.bench_annotate_bc                       # 10 demos, 50 episodes each
    python -m benchmarks.bench_annotate_bc --task click-dialog --demos 10 --eval 50
    python -m benchmarks.bench_annotate_bc --round-trips 40      # the page's round trip only
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

from aiohttp import web

from infra.kafka.own_broker import ROOT, broker_for_benchmarks
from app.ui.annotate import SESSIONS_KEY
from app.ui.server import make_app
from infra.runtime import versions
from infra.runtime.admin import ensure_topics
from infra.runtime.dlq import read_snapshot
from infra.runtime.procs import free_port
from infra.runtime.settings import load_settings
from infra.runtime.topics import TOPICS
from producers.episode import run_episode
from producers.policy_client import RandomClient, TorchClient
from producers.sandboxes.browser import BrowserSandbox
from producers.sandboxes.browser_host import BrowserHost, find_chromium
from schemas.blobs import BlobStore
from schemas.events import ScoredTrajectory, TaskSpec

TARGETS = {"click-dialog": ".ui-dialog-titlebar-close"}  # what the person clicks, per task
SCALE = 3  # annotate.js shows the task area three times larger
WHERE_JS = """(sel) => { const w = document.getElementById('wrap').getBoundingClientRect();
  const b = document.querySelector(sel).getBoundingClientRect();
  return [b.x - w.x + b.width / 2, b.y - w.y + b.height / 2]; }"""


def record(settings, task: str, demos: int, probes: int = 0) -> list[dict]:
    """The person's part: ``demos`` episodes through the page; -> the page's timings. ``probes``
    > 0 measures round trips only: that many clicks beside the dialog in one episode, discarded."""
    from playwright.sync_api import sync_playwright  # Playwright: a browser benchmark

    aio, app = asyncio.new_event_loop(), make_app(settings)  # the UI's loop, in a thread of its own
    threading.Thread(target=aio.run_forever, daemon=True).start()

    def run(coro):
        return asyncio.run_coroutine_threadsafe(coro, aio).result(120)

    runner = web.AppRunner(app)
    run(runner.setup())
    port = free_port()
    run(web.TCPSite(runner, "127.0.0.1", port).start())
    base = f"http://127.0.0.1:{port}"
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=find_chromium(), headless=True)
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            page.goto(base + "/#annotate")
            page.wait_for_selector(f"#annotate-task option[value={task}]", state="attached", timeout=30_000)
            page.select_option("#annotate-task", task)
            page.fill("input[name=name]", "bench")
            if probes:
                page.click("#annotate-go")
                page.wait_for_function("ann.session !== null && ann.view && ann.view.step === 0", timeout=30_000)
                for i in range(probes):
                    page.click("#annotate-shot", position={"x": (3 + i % 8) * SCALE, "y": 200 * SCALE})
                    page.wait_for_function(f"window.annotateTimes.length > {i} && !ann.busy", timeout=30_000)
                page.click("#annotate-discard")
            for seed in range(demos):
                page.fill("input[name=seed]", str(seed))
                page.click("#annotate-go")
                page.wait_for_function("ann.session !== null && ann.view && ann.view.step === 0", timeout=30_000)
                session = app[SESSIONS_KEY].get(page.evaluate("ann.session"))
                x, y = run(session.sandbox.query(f"({WHERE_JS})({json.dumps(TARGETS[task])})"))
                n = page.evaluate("window.annotateTimes.length")
                page.click("#annotate-shot", position={"x": x * SCALE, "y": y * SCALE})
                page.wait_for_function(f"window.annotateTimes.length > {n} && !ann.busy", timeout=30_000)
                print(f"demo {seed}: {page.inner_text('#annotate-status')}", flush=True)
            times = page.evaluate("window.annotateTimes")
            opens = page.evaluate("window.annotateOpens")
            if opens:
                print(f"session start (Start until the first screen): median {percentile(opens, 0.5):.0f} ms, "
                      f"max {max(opens):.0f} ms over {len(opens)}", flush=True)
            browser.close()
    finally:
        run(runner.cleanup())
        aio.call_soon_threadsafe(aio.stop)
    return times


def wait_for_sft(settings, want: int, timeout_s: float) -> int:
    end = time.monotonic() + timeout_s
    while True:
        found = [s for s in read_snapshot(settings, TOPICS.sft, ScoredTrajectory, "bench", 30)
                 if s.trajectory.policy.startswith("human:")]
        if len(found) >= want or time.monotonic() > end:
            return len(found)
        time.sleep(2)


async def success_rate(client, task: str, episodes: int, max_steps: int, blobs: BlobStore) -> float:
    host = BrowserHost()
    sandbox = BrowserSandbox(blobs, host=host)
    await sandbox.start()
    wins = 0
    try:
        for seed in range(episodes):
            spec = TaskSpec(task_id=f"eval.{task}.{seed}", suite="miniwob", name=task, seed=100_000 + seed,
                            max_steps=max_steps)
            result = await run_episode(spec, sandbox, client, lambda _e: None, sandbox_name="browser", worker_id="bench")
            wins += result.success
    finally:
        await sandbox.close()
        await host.close()
    return wins / episodes


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(q * len(ordered) + 0.999) - 1))]


def round_trip_figures(times: list[dict]) -> dict:
    shown = [t["shown_ms"] for t in times]
    return {"actions": len(shown), "median": round(percentile(shown, 0.5), 1),
            "p95": round(percentile(shown, 0.95), 1), "max": round(max(shown), 1)}


def measure_round_trips(task: str, n: int) -> int:
    with broker_for_benchmarks() as bootstrap, tempfile.TemporaryDirectory() as data_dir:
        settings = load_settings({"data_dir": data_dir, "kafka_bootstrap": bootstrap,
                                  "topic_prefix": f"bench-annotate-{uuid.uuid4().hex[:6]}."})
        ensure_topics(settings)
        times = record(settings, task, 0, min(n, 49))
    print(json.dumps({"task": task, "round_trip_ms": round_trip_figures(times)}, indent=1))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="click-dialog", choices=sorted(TARGETS))
    ap.add_argument("--demos", type=int, default=10)
    ap.add_argument("--eval", type=int, default=50)
    ap.add_argument("--max-steps", type=int, default=4, help="step budget of the evaluation episodes")
    ap.add_argument("--round-trips", type=int, default=0,
                    help="only measure: this many actions in one episode (at most 49), no demonstrations, no bc")
    args = ap.parse_args()
    if args.round_trips:
        return measure_round_trips(args.task, args.round_trips)
    t0 = time.monotonic()
    with broker_for_benchmarks() as bootstrap, tempfile.TemporaryDirectory() as data_dir:
        prefix = f"bench-annotate-{uuid.uuid4().hex[:6]}."
        settings = load_settings({"data_dir": data_dir, "kafka_bootstrap": bootstrap, "topic_prefix": prefix})
        ensure_topics(settings)
        env = {**os.environ, "FLYWHEEL_KAFKA_BOOTSTRAP": bootstrap, "FLYWHEEL_TOPIC_PREFIX": prefix,
               "FLYWHEEL_DATA_DIR": data_dir, "PYTHONPATH": str(ROOT)}
        streams = subprocess.Popen([sys.executable, "-m", "app.cli", "streams"], cwd=ROOT, env=env,
                                   stdout=open(Path(data_dir) / "streams.log", "wb"), stderr=subprocess.STDOUT)
        try:
            t_rec = time.monotonic()
            times = record(settings, args.task, args.demos)
            record_s = time.monotonic() - t_rec
            routed = wait_for_sft(settings, args.demos, 180)
        finally:
            streams.terminate()
            streams.wait(60)
        policy = f"bench-annotate-{uuid.uuid4().hex[:6]}"
        bc = subprocess.run([sys.executable, "-m", "app.cli", "bc", "--tasks", args.task, "--suite", "quick",
                             "--demos-from", "human", "--demos-per-task", str(args.demos), "--policy-name", policy],
                            cwd=ROOT, env=env, capture_output=True, text=True)
        if bc.returncode != 0:
            print(bc.stdout[-2000:], bc.stderr[-2000:], file=sys.stderr)
            return 1
        blobs = BlobStore(settings.blob_root)
        pv = versions.latest(settings, policy)
        cloned = TorchClient(policy, greedy=True, blobs=blobs)
        asyncio.run(cloned.load_version(pv, blobs))
        bc_rate = asyncio.run(success_rate(cloned, args.task, args.eval, args.max_steps, blobs))
        random_rate = asyncio.run(success_rate(RandomClient("random", seed=0), args.task, args.eval, args.max_steps, blobs))
    print(json.dumps({
        "task": args.task, "demos_recorded": len(times), "demos_on_sft": routed, "record_s": round(record_s, 1),
        "round_trip_ms": round_trip_figures(times),
        "bc": bc.stdout.strip().splitlines()[-1] if bc.stdout.strip() else "",
        "eval_episodes": args.eval, "max_steps": args.max_steps,
        "success": {"pi_sft_greedy": bc_rate, "random": random_rate}, "wall_s": round(time.monotonic() - t0, 1),
    }, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
