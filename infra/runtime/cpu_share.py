"""Each process's share of the CPU over a run, measured by the run itself (psutil): the main job
samples its children's process trees as it goes, since a process's CPU time is gone once it exits.
A process that exits between samples loses what it used after the last one."""

from __future__ import annotations

import os
import time
from collections import defaultdict

import psutil


class CpuShare:
    def __init__(self) -> None:
        self.seen: dict[str, dict[int, float]] = defaultdict(dict)  # name -> pid -> CPU seconds so far
        self.first: dict[str, dict[int, float]] = defaultdict(dict)  # the same at each pid's first sample
        self.started, self.started_at = time.monotonic(), time.time()
        self.ended = self.started  # the latest sample

    def sample(self, roots: dict[str, int], own: str = "") -> None:
        """Count the CPU of each named root process and its descendants under its name (and of this
        process alone under ``own``, when given)."""
        self.ended = time.monotonic()
        trees = [(name, pid, True) for name, pid in roots.items()] + ([(own, os.getpid(), False)] if own else [])
        for name, pid, recursive in trees:
            try:
                root = psutil.Process(pid)
                procs = [root, *(root.children(recursive=True) if recursive else [])]
            except psutil.Error:
                continue
            for p in procs:
                try:
                    t, born = p.cpu_times(), p.create_time()
                except psutil.Error:
                    continue
                cpu = t.user + t.system
                self.seen[name][p.pid] = cpu
                # what a process used before this measure began is not the run's
                self.first[name].setdefault(p.pid, 0.0 if born >= self.started_at else cpu)

    def rows(self) -> list[tuple[str, float, float]]:
        """(name, CPU seconds, mean cores) per name since the first sample, the largest first."""
        wall = max(self.ended - self.started, 1e-9)
        used = {name: sum(cpu - self.first[name][pid] for pid, cpu in pids.items()) for name, pids in self.seen.items()}
        return sorted(((name, s, s / wall) for name, s in used.items()), key=lambda r: -r[1])

    def markdown(self) -> str:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        wall = self.ended - self.started
        rows = self.rows()
        lines = ["## CPU by process", "",
                 f"Each process's CPU (its children included: a rollout worker's Chromium) over {wall / 60:.1f} minutes "
                 f"of the run, sampled by the run itself; the machine has {cores} cores.", "",
                 "| process | CPU seconds | cores on average | share of the machine |", "|---|---|---|---|"]
        lines += [f"| {name} | {s:.0f} | {c:.2f} | {c / cores:.0%} |" for name, s, c in rows]
        total = sum(c for _, _, c in rows)
        lines += [f"| all | {sum(s for _, s, _ in rows):.0f} | {total:.2f} | {total / cores:.0%} |", ""]
        return "\n".join(lines)
