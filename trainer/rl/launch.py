"""Starting the distributed trainer: `flywheel train --nproc-per-node N`, or one rank of torchrun.

- ``launch``: this process starts N ranks (torch.multiprocessing, spawn) on a free local port and
  supervises them: the first rank to die takes the others down (SIGTERM, then SIGKILL after a
  grace period) and the command exits 1; SIGINT / SIGTERM to it asks rank 0 to stop cleanly
  (it finishes the current step and tells the others to stop). A rank dies with the launcher
  (PR_SET_PDEATHSIG on Linux): no orphan rank 0 keeps reading after a restart.
- ``run_rank``: one rank of a group named by the environment (torchrun's RANK, WORLD_SIZE,
  MASTER_ADDR, MASTER_PORT), e.g. ``torchrun --nproc-per-node 2 -m app.cli train ...``.

Either way rank 0 runs trainer.rl.streaming_ppo.train and the others trainer.rl.distributed.follow; the
exactly-once argument is trainer/rl/streaming_ppo.py's (see trainer/rl/distributed.py for why).
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import sys
import threading
from typing import Any

import torch
import torch.multiprocessing as mp

from infra.runtime.config import ConfigError
from infra.runtime.settings import Settings
from trainer.rl import distributed
from trainer.rl.config import TrainConfig
from trainer.rl.streaming_ppo import train
from infra.runtime.procs import free_port

log = logging.getLogger("flywheel.trainer.launch")
GRACE_S = 5.0  # a failed job's surviving ranks get this long to exit before SIGTERM, then SIGKILL


def under_torchrun() -> bool:
    """True in a process that torchrun (or another launcher using its variables) started."""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def summary_line(summary: dict[str, Any]) -> str:
    return (f"trained {summary['updates']} updates -> version {summary['version']}, "
            f"{summary['trained']} trajectories, idle fraction {summary['idle_fraction']:.2f}")


def run_rank(cfg: TrainConfig, settings: Settings, stop: threading.Event) -> dict[str, Any] | None:
    """Join the group, play this rank's part, leave. Rank 0 returns train()'s summary."""
    cfg.validate()
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if cfg.device != "cpu" and world > 1:  # torchrun's ranks, nproc_per_node left at 1: validate() cannot see them
        raise ConfigError(f"device={cfg.device!r} with {world} trainer ranks: they share each update over gloo on "
                          "the CPU; train on a GPU in one process (one rank)")
    group = distributed.init_group(cfg.dist_timeout_s)
    try:
        if group.leader:
            summary = train(cfg, settings, stop, group)
        else:
            distributed.follow(group)
            summary = None
    except BaseException:
        distributed.close_group(synchronise=False)
        raise
    distributed.close_group()
    return summary


def _die_with(parent: int) -> None:
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
    if os.getppid() != parent:  # the launcher died before the line above
        os._exit(1)


def _rank_main(local_rank: int, cfg: TrainConfig, settings: Settings, world: int, port: int, parent: int,
               verbose: bool) -> None:
    """The body of one spawned rank (module level: spawn pickles it by name)."""
    _die_with(parent)
    os.environ.update(RANK=str(local_rank), LOCAL_RANK=str(local_rank), WORLD_SIZE=str(world),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO,
                        format=f"%(asctime)s %(levelname)s rank{local_rank} %(name)s: %(message)s")
    torch.set_num_threads(cfg.torch_threads or max(1, (os.cpu_count() or 1) // world))
    stop = threading.Event()
    if local_rank == 0:  # rank 0 stops cleanly and tells the others; Ctrl-C reaches every rank
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
    else:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    summary = run_rank(cfg, settings, stop)
    if summary is not None:
        print(summary_line(summary), flush=True)
    distributed.exit_rank(0)


def launch(cfg: TrainConfig, settings: Settings, verbose: bool = False) -> int:
    """Start ``cfg.nproc_per_node`` ranks here and wait for them; 0 when all ended cleanly."""
    if under_torchrun():
        raise ConfigError("--nproc-per-node > 1 starts its own ranks: under torchrun leave it at 1")
    world = cfg.nproc_per_node
    ctx = mp.start_processes(_rank_main, args=(cfg, settings, world, free_port(), os.getpid(), verbose),
                             nprocs=world, join=False, start_method="spawn")
    for r, p in enumerate(ctx.processes):
        log.info("rank %d pid %d", r, p.pid)
    previous = {sig: signal.signal(sig, lambda *_: os.kill(ctx.processes[0].pid, signal.SIGTERM))
                for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        while not ctx.join(grace_period=GRACE_S):
            pass
    except (mp.ProcessRaisedException, mp.ProcessExitedException) as exc:  # one rank failed, the others are gone now
        log.error("distributed trainer failed, every rank stopped: %s", exc)
        return 1
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0
