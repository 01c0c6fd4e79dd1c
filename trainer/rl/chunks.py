"""Long episodes as chunks of at most ``chunk_steps`` steps, and GAE across the cuts.

A 500-step game episode is cut into rows of at most ``chunk_steps`` steps, so the padded
``[B, T]`` tensors of a batch are at most ``chunk_steps`` wide whatever the longest episode
(one 500-step episode among 5-step ones no longer pads every row to 500). Rows of one episode
are consecutive; ``next_row[b]`` is the row holding the chunk after row ``b`` (-1 for an
episode's last chunk), ``episode_length[b]`` the whole episode's number of steps.

At a cut the chunk bootstraps from the critic: the value after the chunk's last step is
``V(s_cut) + lam * A(s_cut)``, the critic's value of the next chunk's first state plus the
lambda-weighted advantage GAE carries back from the later chunk (the lambda-return's bootstrap).
With it a cut changes nothing: the chunked advantages and returns are the whole episode's (to
float rounding), for coupled and decoupled GAE alike, and length-adaptive ``lam_policy`` reads the
whole episode's length, never the chunk's. The chunks are solved last to first.
"""

from __future__ import annotations

import torch

from trainer.rl import ppo


def chunk_spans(length: int, chunk_steps: int) -> list[tuple[int, int]]:
    """``[start, end)`` of each chunk of an episode of ``length`` steps; ``chunk_steps`` <= 0:
    one chunk, the whole episode. ValueError for an empty episode."""
    if length < 1:
        raise ValueError(f"an episode has at least one step, got {length}")
    step = length if chunk_steps <= 0 else chunk_steps
    return [(s, min(s + step, length)) for s in range(0, length, step)]


def chunks_from_end(next_row: torch.Tensor) -> torch.Tensor:
    """[B] long: how many chunks follow each row in its episode (0 for an episode's last).
    ValueError unless each ``next_row[b]`` is -1 or a later row."""
    depth = torch.zeros(len(next_row), dtype=torch.long)
    for b in reversed(range(len(next_row))):
        nxt = int(next_row[b])
        if nxt < 0:
            continue
        if not b < nxt < len(next_row):
            raise ValueError(f"row {b}: the next chunk must be a later row, got {nxt}")
        depth[b] = depth[nxt] + 1
    return depth


def episode_starts(next_row: torch.Tensor) -> torch.Tensor:
    """[B] bool: the rows that hold an episode's first chunk (no row points to them)."""
    starts = torch.ones(len(next_row), dtype=torch.bool)
    starts[next_row[next_row >= 0]] = False
    return starts


def chunked_gae(rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float,
                lam: torch.Tensor, next_row: torch.Tensor, bootstrap: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``ppo.compute_gae`` over chunk rows. rewards, values, mask: [B, T]; lam: [B] each row's
    lambda (its episode's); next_row: [B] as in the module docstring; bootstrap: [B] the value
    after an episode's last step (read on its last chunk's row only). Returns (advantages [B, T],
    returns [B, T]), 0 on padding."""
    B = rewards.shape[0]
    lam = lam.to(rewards.dtype).expand(B)
    adv, ret = torch.zeros_like(rewards), torch.zeros_like(rewards)
    depth = chunks_from_end(next_row)
    for d in range(int(depth.max()) + 1 if B else 0):
        rows = (depth == d).nonzero().squeeze(1)
        boot = bootstrap.to(rewards.dtype)[rows]
        if d > 0:  # the cut: the critic's value of the next chunk's first state + the carried advantage
            nxt = next_row[rows]
            boot = values[nxt, 0] + lam[rows] * adv[nxt, 0]
        adv[rows], ret[rows] = ppo.compute_gae(rewards[rows], values[rows], mask[rows], gamma, lam[rows], boot)
    return adv, ret


def chunked_decoupled_gae(rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float,
                          lam_critic: float, next_row: torch.Tensor, episode_length: torch.Tensor,
                          bootstrap: torch.Tensor, alpha: float | None = None,
                          lam_policy: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``ppo.decoupled_gae`` over chunk rows: actor advantages with ``lam_policy`` (given, or
    length-adaptive from ``alpha`` and ``episode_length`` [B], the whole episode's), critic
    returns with ``lam_critic``. Shapes as in ``chunked_gae``."""
    B = rewards.shape[0]
    if lam_policy is None:
        if alpha is None:
            raise ValueError("give lam_policy or alpha")
        lam_p = ppo.length_adaptive_lam(episode_length, alpha)
    else:
        lam_p = torch.full((B,), float(lam_policy), dtype=rewards.dtype)
    advantages, _ = chunked_gae(rewards, values, mask, gamma, lam_p, next_row, bootstrap)
    _, returns = chunked_gae(rewards, values, mask, gamma, torch.full((B,), float(lam_critic), dtype=rewards.dtype), next_row, bootstrap)
    return advantages, returns
