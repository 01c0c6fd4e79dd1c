"""The collectives one PPO update needs when N ranks share it (torch.distributed, any backend).

``ppo_update`` (trainer/rl/update.py) calls these when it is given a ``Rank``; with none it runs
alone and none of this is touched. Every rank holds the same batch and draws the same minibatch
permutation; rank r computes the loss on its contiguous part of each minibatch (``part``),
scaled by ``len(part) / len(minibatch)``, so that the SUM of the ranks' gradients
(``all_reduce_grads``) is the gradient of the whole minibatch's mean loss: every loss term of
trainer.rl.ppo is a plain mean over steps. Every rank then clips and steps identically.

Invariant: after each ``all_reduce_grads`` every rank holds the same gradients (a SUM all-reduce
leaves one result on all ranks), so ranks that start from the same weights and optimiser state
stay identical, and equal (to float rounding) to one process training on the whole minibatch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class Rank:
    """This process's place in the default process group."""

    rank: int
    world: int


def part(ids: torch.Tensor, me: Rank) -> torch.Tensor:
    """Rank ``me``'s contiguous share of ``ids`` (sizes differ by at most one; may be empty)."""
    return ids.tensor_split(me.world)[me.rank]


def gather_parts(local: torch.Tensor, n: int, me: Rank) -> torch.Tensor:
    """[n] from every rank's ``part(arange(n))`` result, in order: the inverse of ``part``.

    all_gather wants equal sizes, so each part is padded to the longest and cut back after."""
    sizes = [len(p) for p in torch.arange(n).tensor_split(me.world)]
    longest = max(sizes)
    padded = torch.zeros(longest, dtype=local.dtype, device=local.device)
    padded[:len(local)] = local
    out = [torch.empty_like(padded) for _ in range(me.world)]
    dist.all_gather(out, padded)
    return torch.cat([o[:s] for o, s in zip(out, sizes)])


def all_reduce_grads(params: list[torch.nn.Parameter]) -> None:
    """Sum every parameter's gradient over the ranks, in one collective.

    A parameter no rank reached keeps ``grad = None`` (Adam then skips it, as one process would);
    one that some rank reached gets the sum, a rank without a gradient for it adding zeros (a rank
    whose part of a minibatch is empty reaches none). The sum is taken in float32."""
    device = params[0].device
    reached = torch.tensor([float(p.grad is not None) for p in params], device=device)
    flat = torch.cat([p.grad.reshape(-1).float() if p.grad is not None else torch.zeros(p.numel(), device=device)
                      for p in params] + [reached])
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    offset = 0
    for p, anyone in zip(params, flat[-len(params):].tolist()):
        n = p.numel()
        p.grad = flat[offset:offset + n].view_as(p).to(p.dtype).clone() if anyone else None
        offset += n


def all_reduce_sums(sums: dict[str, float]) -> dict[str, float]:
    """Each key summed over the ranks (metrics that each rank weighted by its share)."""
    keys = sorted(sums)
    t = torch.tensor([sums[k] for k in keys], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return dict(zip(keys, t.tolist()))
