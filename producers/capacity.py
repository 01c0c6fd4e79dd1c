"""How many sandboxes fill this machine: the rollout worker's default (``--sandboxes 0``).

A sandbox's step waits on its browser and on the policy by turns, so a worker needs more sandboxes
than cores to keep both busy; memory caps the count: a browser sandbox keeps every task page of a
suite loaded (producers.sandboxes.browser.MAX_PAGES, ~17 MiB each) beside its context and the
screenshots in flight. Pure: the machine's facts are arguments, read by ``machine_sandboxes``.
"""

from __future__ import annotations

import os

import psutil

PER_CORE = 2  # sandboxes per core: on 2 cores 4 sandboxes' browsers take what the policy leaves (bench_main_loop.py)
SANDBOX_MIB = 400  # memory set aside per browser sandbox (12 pages, its context, screenshots in flight)
MEMORY_SHARE = 0.5  # of the available memory: the trainer, the streams and the sink share the machine
MAX_SANDBOXES = 64  # one worker's event loop; more machines or workers beyond that


def sandboxes_for(cores: int, available_mib: float, workers: int = 1) -> int:
    """Sandboxes per worker for ``workers`` workers on a machine with ``cores`` and ``available_mib``."""
    by_cpu = PER_CORE * max(cores, 1)
    by_memory = int(available_mib * MEMORY_SHARE // SANDBOX_MIB)
    return max(1, min(by_cpu, by_memory, MAX_SANDBOXES * workers) // max(workers, 1))


def machine_sandboxes(workers: int = 1) -> int:
    """``sandboxes_for`` this machine: its cores (those this process may run on) and available memory."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return sandboxes_for(cores, psutil.virtual_memory().available / 2**20, workers)
