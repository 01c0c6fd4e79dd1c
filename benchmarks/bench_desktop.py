"""Desktop sandbox: step latency (action + settled screenshot + PNG to the blob store) and memory.

Side by side in one run, on the same display and the same xterm window:
- ``sandbox``: ``DesktopSandbox.step(Click)`` — executor round trip, settle check, PNG, blob put;
- ``bare``: a plain pyautogui.click + ImageGrab.grab loop in one process (no settle, no PNG).
Memory: RSS and PSS of Xvfb + the executor + the task's programs (whole process trees), for
the terminal task and for the editor task.

    python -m benchmarks.bench_desktop --steps 40
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time

import psutil

from producers.sandboxes.desktop import DesktopConfig, DesktopSandbox
from schemas.actions import Click
from schemas.blobs import BlobStore
from schemas.events import TaskSpec

BARE = """
import sys, time, pyautogui
from PIL import ImageGrab
pyautogui.PAUSE = 0; pyautogui.FAILSAFE = False
n = int(sys.argv[1]); times = []
for i in range(n):
    t = time.perf_counter()
    pyautogui.click(200 + 40 * (i % 2), 200)
    ImageGrab.grab(xdisplay=None)
    times.append((time.perf_counter() - t) * 1000)
print(sorted(times)[len(times) // 2])
"""


def tree_memory(pids: list[int]) -> tuple[float, float, int]:
    """(RSS MiB, PSS MiB, processes) over the given processes and all their descendants."""
    procs: dict[int, psutil.Process] = {}
    for pid in pids:
        try:
            root = psutil.Process(pid)
        except psutil.NoSuchProcess:
            continue
        for p in [root, *root.children(recursive=True)]:
            procs[p.pid] = p
    rss = pss = 0
    for p in procs.values():
        try:
            info = p.memory_full_info()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        rss += info.rss
        pss += getattr(info, "pss", info.rss)
    return rss / 2**20, pss / 2**20, len(procs)


def pct(values: list[float], q: float) -> float:
    return sorted(values)[min(len(values) - 1, int(q * len(values)))]


async def main(steps: int, width: int, height: int) -> None:
    blobs = BlobStore(tempfile.mkdtemp(prefix="bench-desktop-blobs-"))
    sandbox = DesktopSandbox(blobs, DesktopConfig(width=width, height=height))
    t = time.perf_counter()
    await sandbox.start()
    start_ms = (time.perf_counter() - t) * 1000
    try:
        memory = {}
        for name in ("desktop.type-in-editor", "desktop.terminal-echo"):
            t = time.perf_counter()
            await sandbox.reset(TaskSpec(task_id="bench", suite="desktop", name=name))
            reset_ms = (time.perf_counter() - t) * 1000
            await asyncio.sleep(1.0)  # let the programs finish starting before measuring them
            pids = [sandbox.display.proc.pid, sandbox.executor.proc.pid, *(p.pid for p in sandbox.apps)]
            memory[name] = (*tree_memory(pids), reset_ms)

        # the terminal task is loaded now: click alternately in its window, which redraws nothing
        latencies = []
        for i in range(steps):
            t = time.perf_counter()
            result = await sandbox.step(Click(x=0.25 + 0.05 * (i % 2), y=0.3))
            latencies.append((time.perf_counter() - t) * 1000)
            assert result.error is None
        env = {**os.environ, **sandbox.display.env()}
        bare = subprocess.run([sys.executable, "-c", BARE, str(steps)], env=env, capture_output=True,
                              text=True, timeout=300, check=True)
        bare_ms = float(bare.stdout.strip())
    finally:
        await sandbox.close()

    p50 = statistics.median(latencies)
    print(f"desktop sandbox {width}x{height}, isolation={sandbox.isolation}, "
          f"settle_ms={sandbox.cfg.settle_ms}, {steps} click steps; load avg {os.getloadavg()[0]:.1f} "
          f"on {os.cpu_count()} cores")
    print(f"  start (Xvfb + executor): {start_ms:.0f} ms")
    print(f"  step  click+screenshot+PNG+blob: p50 {p50:.0f} ms  p95 {pct(latencies, 0.95):.0f} ms  "
          f"-> {1000 / p50:.1f} steps/s")
    print(f"  bare  pyautogui.click+ImageGrab:  p50 {bare_ms:.0f} ms  -> sandbox/bare = {p50 / bare_ms:.1f}x")
    for name, (rss, pss, n, reset_ms) in memory.items():
        print(f"  {name:24s} reset {reset_ms:.0f} ms; memory RSS {rss:.0f} MiB, PSS {pss:.0f} MiB "
              f"({n} processes: Xvfb, executor, programs)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--height", type=int, default=768)
    args = parser.parse_args()
    asyncio.run(main(args.steps, args.width, args.height))
