"""The distributed PPO update on 2 gloo ranks (spawned processes, localhost) against one process.

Rank 0 takes the policy and the batches the way the streaming trainer does (share_start, then
lead_update), rank 1 follows (trainer.rl.distributed.follow); after a critic-only update and a PPO
update, both ranks' weights must equal those of one process running ppo_update on the same
batches with the same minibatch permutation, for the pixel and the language policy. And a rank
that dies or hangs makes the other fail within the collective timeout instead of waiting forever.

Two optimisers: SGD, whose step is linear in the gradient, so the weights show whether the
all-reduced gradient is the whole minibatch's; and Adam, the trainer's, with eps=1e-4. Adam divides
each gradient by its running RMS, so a gradient that is zero in exact arithmetic is float noise
(~1e-8) in one process and in two alike, and Adam with its default eps turns that noise into steps
of size lr: the pixel policy's loc_head.bias is one (a softmax over cells is blind to a shift);
with the default eps it ended 7e-4 apart here (a tenth of its own movement) while every tensor with
a real gradient agreed to 1e-7. An eps above the noise keeps the comparison about the update.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from infra.runtime.policy import PolicyInput, build_policy
from schemas.actions import Click
from trainer.rl.config import TrainConfig
from tests.fakes.clicks import make_episode
from trainer.rl.update import EpisodeSample, collate, ppo_update
from infra.runtime.procs import free_port

SEEDS = (11, 12)  # minibatch permutation of the critic-only update, then of the PPO update
PIXEL = ("pixel", "p-dist", {"grid": 4, "channels": [4, 8, 8], "action_types": ["click"], "seed": 1})
LM = ("lm", "lm-dist", {"max_new_tokens": 12, "seed": 0})
# 11 pixel steps / 7 LM steps in minibatches of 5 / 3: the last minibatch has one step, so rank
# 1's part of it is empty (it still joins the all-reduce with zeros)
# the pixel one stops after its first epoch (target_kl): every rank must reach that answer; its
# batch has expert labels on some steps (DAgger's term, expert_coef), which a rank may hold none of
CFG = {"pixel": TrainConfig(epochs=2, minibatch_size=5, lr=3e-3, target_kl=1e-9, expert_coef=0.5),
       "lm": TrainConfig(policy_kind="lm", pretrained="", epochs=2, minibatch_size=3, lr=1e-3)}


def _env(rank: int, world: int, port: int) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)


def _pixel_batch(policy) -> list[EpisodeSample]:
    torch.manual_seed(3)
    with torch.no_grad():  # the heads start at zero (uniform): make them non-trivial
        for p in policy.parameters():
            p.add_(0.3 * torch.randn_like(p))
    rng = np.random.default_rng(0)
    out = []
    for k, length in enumerate([1, 2, 3, 1, 4]):
        eps = [make_episode("click-test", rng) for _ in range(length)]
        ds = policy.act([PolicyInput(e.image, e.instruction, 160, 210) for e in eps])
        out.append(EpisodeSample(f"e{k}", [policy.preprocess(e.image) for e in eps], [e.instruction for e in eps],
                                 [d.action for d in ds], [d.logprob - 0.05 * k for d in ds],
                                 [0.0] * (length - 1) + [float(k % 2)], 0, truncated=k == 2,
                                 experts=[Click(x=0.1, y=0.1)] * length if k in (1, 4) else None))
    return out


def _lm_batch(policy) -> list[EpisodeSample]:
    rng = np.random.default_rng(0)
    out = []
    for k, length in enumerate([2, 1, 3, 1]):
        inps = [PolicyInput(rng.integers(0, 255, (40, 50, 3), dtype=np.uint8), "Click the button.", 50, 40)
                for _ in range(length)]
        samples = [policy.decision_sample(inp, f"Thought: t{k}{i}\nAction: click(start_box='({k},{i})')")
                   for i, inp in enumerate(inps)]
        with torch.no_grad():
            lps = policy.sequence_logprobs(samples).tolist()
        out.append(EpisodeSample(f"e{k}", samples, [inp.instruction for inp in inps], [Click(x=0.5, y=0.5)] * length,
                                 [lp - 0.1 * k for lp in lps], [0.0] * (length - 1) + [1.0 if k % 2 else -1.0], 0,
                                 truncated=k == 0))
    return out


def _setup(kind: str):
    """The policy and batch every process starts from (built once, saved, loaded by the ranks)."""
    kind, name, config = PIXEL if kind == "pixel" else LM
    policy = build_policy(kind, name, config)
    batch = collate(_pixel_batch(policy) if kind == "pixel" else _lm_batch(policy))
    return policy, batch


def _load(path: Path):
    saved = torch.load(path, weights_only=False)
    kind, name, config = PIXEL if saved["kind"] == "pixel" else LM
    policy = build_policy(kind, name, config)
    policy.load_state_dict(saved["weights"])
    return saved["kind"], policy, saved["batch"]


def _optimizer(name: str, params, lr: float) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=lr) if name == "sgd" else torch.optim.Adam(params, lr=lr, eps=1e-4)


def _rank(rank: int, world: int, port: int, start: str, opt: str, out: str) -> None:
    """One rank of the job: rank 0 leads two updates as the trainer does, the others follow."""
    from trainer.rl import distributed

    _env(rank, world, port)
    group = distributed.init_group(timeout_s=60)
    if rank == 0:
        kind, policy, batch = _load(Path(start))
        optimizer = _optimizer(opt, policy.parameters(), CFG[kind].lr)
        distributed.share_start(group, CFG[kind], policy, optimizer)
        metrics = [distributed.lead_update(group, policy, optimizer, batch, CFG[kind], critic_only, seed)
                   for critic_only, seed in zip((True, False), SEEDS)]
        distributed.release(group)
    else:
        policy, metrics = distributed.follow(group), None
    torch.save({"weights": policy.state_dict(), "metrics": metrics}, out.format(rank))
    distributed.close_group()
    distributed.exit_rank(0)  # as trainer.rl.launch's ranks do


def _spawn(target, world: int, *args) -> list[multiprocessing.Process]:
    ctx, port = multiprocessing.get_context("spawn"), free_port()
    procs = [ctx.Process(target=target, args=(r, world, port, *args)) for r in range(world)]
    for p in procs:
        p.start()
    return procs


@pytest.mark.parametrize("opt", ["sgd", "adam"])
@pytest.mark.parametrize("kind", ["pixel", "lm"])
def test_two_ranks_update_equals_one_process(kind, opt, tmp_path):
    policy, batch = _setup(kind)
    torch.save({"kind": kind, "weights": policy.state_dict(), "batch": batch}, tmp_path / "start.pt")
    procs = _spawn(_rank, 2, str(tmp_path / "start.pt"), opt, str(tmp_path / "rank{}.pt"))

    # the reference: one process, the same batch, the same permutations
    _, ref, ref_batch = _load(tmp_path / "start.pt")
    optimizer = _optimizer(opt, ref.parameters(), CFG[kind].lr)
    ref_metrics = [ppo_update(ref, optimizer, ref_batch, CFG[kind], critic_only=critic_only,
                              generator=torch.Generator().manual_seed(seed))
                   for critic_only, seed in zip((True, False), SEEDS)]

    for p in procs:
        p.join(timeout=240)
    assert [p.exitcode for p in procs] == [0, 0], "a rank failed or hung"
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(2)]
    start = policy.state_dict()
    want = ref.state_dict()
    moved = max(float((want[k].float() - start[k].float()).abs().max()) for k in want)
    diff = max(float((ranks[0]["weights"][k].float() - want[k].float()).abs().max()) for k in want)
    between = max(float((ranks[0]["weights"][k].float() - ranks[1]["weights"][k].float()).abs().max()) for k in want)
    print(f"{kind} {opt}: weights moved up to {moved:.2e}; 2 ranks vs 1 process max |diff| {diff:.2e}; "
          f"rank 0 vs rank 1 {between:.2e}")
    assert moved > 1e-3, "the update did not move the weights: the comparison would prove nothing"
    assert ref_metrics[1]["train/epochs"] == (1 if kind == "pixel" else 2)
    assert between == 0.0, "the ranks' weights diverged"
    assert diff < 1e-5
    for got, ref_m in zip(ranks[0]["metrics"], ref_metrics):
        for k in ("losses/pg_loss", "losses/value_loss", "losses/entropy", "losses/clip_frac", "losses/approx_kl",
                  "value/explained_variance", "train/epochs"):
            assert got[k] == pytest.approx(ref_m[k], rel=1e-4, abs=1e-6), k
    if kind == "pixel":  # the mean NLL of the labelled steps, however the ranks split them
        assert ranks[0]["metrics"][1]["losses/expert_loss"] == pytest.approx(ref_metrics[1]["losses/expert_loss"],
                                                                             rel=1e-4)


def _die_then_wait(rank: int, world: int, port: int, how: str, out: str) -> None:
    """Rank 1 is SIGKILLed (``how="killed"``) or never joins the collective (``"hung"``);
    rank 0 records what its next collective did and when."""
    from trainer.rl import distributed

    _env(rank, world, port)
    distributed.init_group(timeout_s=4)
    if rank == 1:
        if how == "killed":
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(600)
    t0 = time.monotonic()
    try:
        torch.distributed.all_reduce(torch.ones(3))
        outcome = "returned"
    except Exception as exc:  # noqa: BLE001 - which error is reported, the test only needs that one is
        outcome = f"raised {type(exc).__name__}: {str(exc)[:200]}"
    Path(out).write_text(f"{time.monotonic() - t0:.2f}\n{outcome}")


@pytest.mark.parametrize("how", ["killed", "hung"])
def test_a_dead_or_hung_rank_fails_the_other_within_the_timeout(how, tmp_path):
    out = tmp_path / "rank0.txt"
    procs = _spawn(_die_then_wait, 2, how, str(out))
    procs[0].join(timeout=60)
    alive = procs[0].is_alive()
    for p in procs:
        if p.is_alive():
            p.kill()
        p.join(timeout=10)
    assert not alive, "rank 0 hung in the collective past its timeout"
    elapsed, outcome = out.read_text().split("\n", 1)
    print(f"{how} peer: rank 0's all_reduce {outcome} after {elapsed} s (timeout 4 s)")
    assert outcome.startswith("raised"), outcome
    # a killed peer closed its connection: at once; a hung one: the timeout
    assert float(elapsed) < 2 if how == "killed" else 3.5 < float(elapsed) < 4 + 10
