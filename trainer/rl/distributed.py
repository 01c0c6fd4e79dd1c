"""The streaming PPO trainer on N ranks (torch.distributed): who reads, what travels, who follows.

How the ranks share flywheel.rl.v1: rank 0 alone consumes it and runs trainer/rl/streaming_ppo.py's loop
unchanged (pool, staleness, ledger, checkpoint, announce, commit); when a batch is ready it
broadcasts it to the other ranks, and all of them run one ``ppo_update`` on it together
(trainer.rl.collectives: each rank takes its part of every minibatch, gradients are summed).
Why rank 0 reads and broadcasts rather than each rank owning partitions:
- one consumer and one checkpoint file keep the exactly-once argument of the one-process trainer
  word for word: the checkpoint holds every offset because one process reads them all, and there
  is no cross-rank commit to agree on;
- the ranks stay in lock-step on identical batches: partitions of uneven traffic would leave
  one rank's all-reduce waiting on another's pool, and staleness is judged against one version;
- the trainer is bound by compute (epochs x minibatches of backward passes), not by reading, so
  one reader does not hold N ranks back; the broadcast costs one copy of the batch per update.

What travels, all from rank 0 (``broadcast_object_list`` for objects, ``broadcast`` for
weights): at start the config, the policy's kind / name / config, its weights and the optimiser
state (so every rank resumes from rank 0's checkpoint); then one ``Order`` at a time: ``update``
(the collated batch, critic_only, the seed of the minibatch permutation), ``idle`` (a keep-alive
while rank 0 waits for data, so a follower's wait never reaches the collective timeout), and
``stop``. Followers hold no Kafka client and write nothing.

Failure: every collective has the process group's timeout; a rank that is killed closes its
connections, so the others fail at their next collective (at once, not after the timeout), and
the launcher (trainer.rl.launch, or torchrun) ends the job non-zero. A restart resumes from rank 0's
checkpoint: a batch whose checkpoint was not written is read again, one whose checkpoint was
written is not, whichever rank died.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, NoReturn

import torch
import torch.distributed as dist

from infra.runtime.policy import build_policy
from trainer.rl.collectives import Rank
from trainer.rl.update import Batch, make_optimizer, ppo_update

log = logging.getLogger("flywheel.trainer.distributed")


@dataclass
class Group:
    """This rank in the trainer's process group, and when rank 0 last spoke to the others."""

    me: Rank
    keepalive_s: float
    last_sent: float = field(default_factory=time.monotonic)

    @property
    def leader(self) -> bool:
        return self.me.rank == 0


@dataclass
class Order:
    """What rank 0 tells the followers to do next."""

    kind: str  # "update" | "idle" | "stop"
    batch: Batch | None = None
    critic_only: bool = False
    seed: int = 0


@dataclass
class Start:
    """What a follower needs to hold rank 0's policy and optimiser (the weights follow)."""

    cfg: Any  # trainer.rl.config.TrainConfig
    kind: str
    name: str
    config: dict[str, Any]
    optimizer_class: type
    optimizer: dict[str, Any]  # its state_dict: hyper-parameters and moments


def init_group(timeout_s: float, backend: str = "gloo") -> Group:
    """Join the process group named by the environment (RANK, WORLD_SIZE, MASTER_ADDR,
    MASTER_PORT: torchrun's, or trainer.rl.launch's). Every collective times out after ``timeout_s``."""
    dist.init_process_group(backend, timeout=timedelta(seconds=timeout_s))
    me = Rank(dist.get_rank(), dist.get_world_size())
    log.info("rank %d of %d joined (%s, timeout %.0fs)", me.rank, me.world, backend, timeout_s)
    return Group(me, keepalive_s=max(timeout_s / 4, 0.5))


def close_group(synchronise: bool = True) -> None:
    """Leave the group. After a clean run (``synchronise``) every rank first waits for the others:
    a rank that closes its connections while a peer is still busy (saving, logging) makes the
    peer's gloo thread abort that process (SIGABRT, "terminate called without an active
    exception", seen once in CI on the follower). After a failure there is nobody to wait for."""
    if not dist.is_initialized():
        return
    if synchronise:
        dist.barrier()
    dist.destroy_process_group()


def exit_rank(code: int = 0) -> NoReturn:
    """End a rank's process now that its group is closed, flushing logs and output first but
    skipping the interpreter's finalisation. A finished rank aborted there (SIGABRT, "terminate
    called without an active exception", once on the follower and once on rank 0 in CI, each
    after all of its work was done): C++ objects of the process group still hold threads when
    the interpreter tears down. Nothing a rank writes is left to finalisation (files are closed,
    Kafka clients flushed and closed by then)."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(code)


# ---------------------------------------------------------------- messages from rank 0


def send(group: Group, obj: Any) -> None:
    dist.broadcast_object_list([obj], src=0)
    group.last_sent = time.monotonic()


def receive() -> Any:
    box: list[Any] = [None]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def _broadcast_weights(policy: torch.nn.Module) -> None:
    with torch.no_grad():
        for tensor in policy.state_dict().values():  # views of the parameters: filled in place
            dist.broadcast(tensor, src=0)


# ---------------------------------------------------------------- rank 0's side


def share_start(group: Group, cfg, policy, optimizer: torch.optim.Optimizer) -> None:
    """Rank 0, once its policy is resumed: every follower gets the same weights and optimiser."""
    send(group, Start(cfg, policy.kind, policy.name, policy.config_dict(), type(optimizer), optimizer.state_dict()))
    _broadcast_weights(policy)


def lead_update(group: Group, policy, optimizer: torch.optim.Optimizer, batch: Batch, cfg,
                critic_only: bool, seed: int | None = None) -> dict[str, float]:
    """Rank 0's ``ppo_update``: the followers get the batch and the seed of the minibatch
    permutation first (``seed``; default: drawn from torch's global generator)."""
    seed = int(torch.randint(0, 2**62, (1,)).item()) if seed is None else seed
    send(group, Order("update", batch, critic_only, seed))
    return ppo_update(policy, optimizer, batch, cfg, critic_only=critic_only, me=group.me,
                      generator=torch.Generator().manual_seed(seed))


def keep_alive(group: Group) -> None:
    """Rank 0 waiting for data: tell the followers now and then, so they do not time out."""
    if time.monotonic() - group.last_sent >= group.keepalive_s:
        send(group, Order("idle"))


def release(group: Group) -> None:
    """Rank 0 stopped cleanly: so do the followers."""
    send(group, Order("stop"))


# ---------------------------------------------------------------- the other ranks


def receive_start() -> tuple[Any, Any, torch.optim.Optimizer]:
    start: Start = receive()
    policy = build_policy(start.kind, start.name, start.config)
    _broadcast_weights(policy)
    optimizer = make_optimizer(policy, start.cfg.lr, start.cfg.head_lr_mult, start.optimizer_class)
    optimizer.load_state_dict(start.optimizer)  # rank 0's hyper-parameters and state replace these
    return start.cfg, policy, optimizer


def follow(group: Group) -> Any:
    """A rank other than 0: take rank 0's policy, then run every update it orders until it says
    stop. Returns the policy as it ended (rank 0 holds the same weights)."""
    cfg, policy, optimizer = receive_start()
    if cfg.torch_threads:
        torch.set_num_threads(cfg.torch_threads)
    updates = 0
    while True:
        order: Order = receive()
        if order.kind == "stop":
            log.info("rank %d: stop after %d updates", group.me.rank, updates)
            return policy
        if order.kind == "update":
            ppo_update(policy, optimizer, order.batch, cfg, critic_only=order.critic_only, me=group.me,
                       generator=torch.Generator().manual_seed(order.seed))
            updates += 1
