"""The exploration floor (--explore): the curriculum asks it of the tasks it reads as unsolved, the
task carries it, the rollout's torch client hands it to the pixel policy, which draws from the
mixture and logs the mixture's log-prob; a bad value is refused where a task is checked."""

from __future__ import annotations

import asyncio
import math

import numpy as np
import pytest
import torch

from app.curriculum import EXPLORE_BELOW, MIN_EPISODES, TaskFeed, exploring
from app.demo_config import DemoConfig
from infra.runtime.errors import UserError
from infra.runtime.policy import PolicyInput, build_policy
from producers.tasks import EXPLORE, EXPLORE_AT, build_tasks, check_task, explore_share
from trainer.policies.pixel.model import mix_floor
from tests.unit.pixel_inputs import random_inputs


def test_the_mixture_is_a_distribution_with_the_floor_and_none_is_the_policy():
    logits = torch.randn(3, 2, 400) * 4
    e = torch.tensor([0.0, 0.3, 0.9])
    mixed = mix_floor(logits, e)
    p = mixed.exp()
    assert torch.allclose(p.sum(-1), torch.ones(3, 2), atol=1e-5)
    assert torch.allclose(mixed[0], torch.log_softmax(logits[0], -1), atol=1e-6)  # e = 0: the policy's own
    want = 0.7 * torch.softmax(logits[1], -1) + 0.3 / 400
    assert torch.allclose(p[1], want, atol=1e-6)
    assert float(p[2].min()) >= 0.9 / 400 - 1e-7  # no cell below the floor however sharp the logits


def _inputs(n: int) -> list[PolicyInput]:
    return random_inputs(n, "Click the menu")


class _Sharp(torch.nn.Module):
    """A click head plus a fixed random map of scale 10: the policy puts most of its mass on a
    few cells, so the mixture's log-prob is far from the policy's own."""

    def __init__(self, inner: torch.nn.Module, grid: int) -> None:
        super().__init__()
        self.inner = inner
        self.register_buffer("pattern", torch.randn(1, 1, grid, grid, generator=torch.Generator().manual_seed(0)) * 10)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.inner(h) + self.pattern


def test_an_exploring_decision_is_drawn_from_the_mixture_and_logs_its_log_prob():
    policy = build_policy("pixel", "p", {"seed": 1})
    policy.loc_head = _Sharp(policy.loc_head, policy.cfg["grid"])  # far from uniform, as a trained head is
    inputs = _inputs(16)
    own = policy.act(inputs)
    explored = policy.act(inputs, explore=[0.5] * 16)
    obs = torch.stack([policy.preprocess(i.image, i.history, i.instruction) for i in inputs])
    actions = [d.action for d in explored]
    with torch.no_grad():
        lp_policy, _, _ = policy.evaluate(obs, [i.instruction for i in inputs], actions)
    # the behaviour log-prob is the mixture's: log(0.5 pi(a) + 0.5 / G^2), for every decision
    cells = policy.cfg["grid"] ** 2
    assert float((torch.tensor([d.logprob for d in explored]) - lp_policy).abs().max()) > 1.0  # not the policy's
    want = torch.logaddexp(math.log(0.5) + lp_policy, torch.full_like(lp_policy, math.log(0.5 / cells)))
    assert torch.allclose(torch.tensor([d.logprob for d in explored]), want, atol=1e-4)
    # without the floor the logged log-prob is the policy's own, as evaluate gives it
    lp_own, _, _ = policy.evaluate(obs, [i.instruction for i in inputs], [d.action for d in own])
    assert torch.allclose(torch.tensor([d.logprob for d in own]), lp_own, atol=1e-4)
    # per input: an input asked for no floor acts as the policy alone, beside one that explores
    mixed = policy.act(inputs[:2], explore=[0.0, 0.5])
    lp0, _, _ = policy.evaluate(obs[:1], [inputs[0].instruction], [mixed[0].action])
    assert mixed[0].logprob == pytest.approx(float(lp0[0].detach()), abs=1e-4)


def test_a_floor_spreads_the_clicks_of_a_sharp_policy():
    policy = build_policy("pixel", "p", {"seed": 2})
    obs = torch.stack([policy.preprocess(i.image, i.history, i.instruction) for i in _inputs(1)])
    with torch.no_grad():
        out = {k: v.expand(200, *v.shape[1:]) for k, v in policy(obs, ["Click the menu"]).items()}
    sharp = {**out, "cells": out["cells"] * 0 + torch.nn.functional.one_hot(torch.zeros(200, out["cells"].shape[1],
                                                                                       dtype=torch.long),
                                                                            out["cells"].shape[-1]) * 50.0}
    torch.manual_seed(0)
    alone = {a.model_dump_json() for a in policy._sample(sharp, ["Click the menu"] * 200, greedy=False)}
    floored = {**sharp, "cells": mix_floor(sharp["cells"], torch.full((200,), 0.5))}
    spread = {a.model_dump_json() for a in policy._sample(floored, ["Click the menu"] * 200, greedy=False)}
    assert len(alone) == 1 and len(spread) > 50  # ~100 uniform draws over 400 cells


def test_the_curriculum_floors_only_the_tasks_below_the_bar_and_less_as_they_near_it():
    rates = {"a": (0.0, 30), "b": (EXPLORE_BELOW, 30), "c": (0.5, MIN_EPISODES - 1), "d": (EXPLORE_BELOW / 2, 30),
             "f": (EXPLORE_BELOW * 0.9, 30), "g": (0.8, 30)}
    out = exploring(["a", "b", "c", "d", "e", "f", "g"], rates, {}, 0.4)
    assert out == pytest.approx({"a": 0.4, "b": 0.0, "c": 0.4, "d": 0.2, "e": 0.4, "f": 0.04, "g": 0.0})
    assert exploring(["a", "c"], rates, {}, 0.0) == {"a": 0.0, "c": 0.0}  # off
    assert exploring(["games.mines"], {}, {"games.mines": (0.6, 40)}, 0.4) == {"games.mines": 0.0}  # a game: its score


def test_the_feed_sends_the_floor_with_each_unsolved_tasks_episodes():
    sent: list = []
    feed = TaskFeed(["click-menu", "click-tab-2"], queue=8, seed=0, max_steps=8, run="r.rl",
                    send=lambda specs: sent.extend(specs) or len(specs), max_per_task=100, explore=0.5)
    feed.refill(0, {"click-menu": (0.5, 30), "click-tab-2": (0.0, 30)}, {})
    floors = {s.name: {explore_share(x) for x in sent if x.name == s.name} for s in sent}
    assert floors == {"click-menu": {0.0}, "click-tab-2": {0.5}}
    assert all(EXPLORE not in s.params for s in sent if s.name == "click-menu")  # nothing asked, nothing carried
    plain: list = []
    TaskFeed(["click-menu"], queue=4, seed=0, max_steps=8, run="r.rl", send=lambda specs: plain.extend(specs) or 4,
             max_per_task=100).refill(0, {}, {})
    assert plain and all(s.params == {} for s in plain)  # off by default


@pytest.mark.parametrize("bad", [1.0, -0.1, float("nan"), "0.5", True, None])
def test_a_task_with_a_bad_floor_is_refused_where_tasks_are_checked(bad):
    task = build_tasks("miniwob", ["click-menu"], 1, params={EXPLORE: 0.5})[0]
    check_task(task)
    task.params[EXPLORE] = bad
    with pytest.raises(ValueError, match="explore"):
        check_task(task)


def test_the_torch_client_passes_each_episodes_floor_to_the_policy():
    from producers.policy_client import PolicyRequest, TorchClient
    from producers.sandboxes.base import Obs
    from schemas.events import BlobRef, Observation

    seen: list = []

    class Recorder:
        version = 0

        def act(self, inputs, greedy=False, *explore):
            seen.append(explore)
            return [type("D", (), {"logprob": 0.0})() for _ in inputs]

    client = TorchClient("p", threads=0, policy=Recorder())
    image = np.zeros((210, 160, 3), dtype=np.uint8)
    ref = BlobRef(sha256="0" * 64, uri="file:///nowhere", width=160, height=210)
    obs = Obs(observation=Observation(screenshot=ref, screen_width=160, screen_height=210, instruction="Click"),
              image=image)
    tasks = build_tasks("miniwob", ["click-menu"], 2, params={EXPLORE: 0.25})
    tasks[1] = build_tasks("miniwob", ["click-menu"], 1)[0]

    async def both():
        return await asyncio.gather(*(client.act(PolicyRequest(task=t, obs=obs, step_index=0)) for t in tasks))

    asyncio.run(both())
    assert seen == [([0.25, 0.0],)]  # one batch, each input its own floor

    seen.clear()
    asyncio.run(client.act(PolicyRequest(task=tasks[1], obs=obs, step_index=0)))
    assert seen == [()]  # no floor asked: the plain act(inputs, greedy) every kind has

    # a guided floor (--explore-from) hands each input's points beside the shares
    guided = build_tasks("miniwob", ["click-menu"], 1, params={EXPLORE: 0.5, EXPLORE_AT: [[0, 0.2, 0.05]]})[0]
    seen.clear()

    async def guide_and_uniform():
        return await asyncio.gather(*(client.act(PolicyRequest(task=t, obs=obs, step_index=0))
                                      for t in (guided, tasks[0])))

    asyncio.run(guide_and_uniform())
    assert seen == [([0.5, 0.25], [[(0, 0.2, 0.05)], []])]


def test_the_demo_refuses_a_floor_it_cannot_honour():
    for bad in (1.0, -0.5, -2.0, float("nan")):
        with pytest.raises(UserError, match="--explore"):
            DemoConfig(explore=bad).validate()
    with pytest.raises(UserError, match="curriculum"):
        DemoConfig(explore=0.3, curriculum=False).validate()
    with pytest.raises(UserError, match="pixel"):
        DemoConfig(explore=0.3, policy_kind="lm").validate()
    from infra.runtime.policy import policy_kind

    # the kind says what it can do (PolicyKind.explores), not its name
    assert policy_kind("pixel").explores and not policy_kind("lm").explores
    DemoConfig(explore=0.3).validate()
    DemoConfig(policy_kind="lm").validate()  # auto asks nothing of a kind that cannot explore
    DemoConfig(curriculum=False).validate()  # nor of a run without the curriculum


def test_the_demo_hands_its_floor_to_the_feed_and_says_so(monkeypatch):
    from app import demo

    sent: list = []
    monkeypatch.setattr(demo.phases, "send_tasks", lambda settings, specs: sent.extend(specs) or len(specs))
    feed = demo.task_feed(DemoConfig(explore=0.3), None, "r", ["click-menu"], 8)
    feed.refill(0, {}, {})
    assert feed.explore == 0.3 and sent and all(explore_share(s) == 0.3 for s in sent)
    assert demo.task_feed(DemoConfig(explore=0.0), None, "r", ["click-menu"], 8).explore == 0.0


def test_the_floor_on_auto_is_on_from_random_weights_on_miniwob_tasks_only():
    from app.curriculum import EXPLORE_AUTO
    from app.demo_config import effective

    every = frozenset({"click-button", "games.2048", "games.mines", "games.snake"})  # what has a demonstrator
    assert DemoConfig().explore == -1  # auto until the run resolves it
    cfg, _, _ = effective(DemoConfig(tasks=["multistep"], cold_start_demos=0), every)
    assert cfg.explore == EXPLORE_AUTO == 0.5
    cfg, _, _ = effective(DemoConfig(tasks=["click-menu"]), every)  # no demonstrator: from random weights
    assert cfg.explore == 0.5
    for off in (DemoConfig(tasks=["click-button"]),  # a cold start: pi_sft clicks as its demonstrator did
                DemoConfig(tasks=["click-button", "click-menu"]),  # a cold start over some of the tasks
                DemoConfig(tasks=["click-menu"], start_from="sft-s0@3"),  # RL from another run's version
                DemoConfig(tasks=["games"], cold_start_demos=0),  # the games: not measured with it
                DemoConfig(tasks=["click-menu"], curriculum=False),  # no curriculum to read a task's success
                DemoConfig(tasks=["click-menu"], policy_kind="lm")):  # a kind that does not explore
        cfg, _, _ = effective(off, every)
        assert cfg.explore == 0.0, off
    cfg, _, _ = effective(DemoConfig(tasks=["click-menu"], explore=0.2), every)  # a given share is kept
    assert cfg.explore == 0.2
    cfg, _, _ = effective(DemoConfig(tasks=["click-menu"], explore=0.0), every)  # and 0 is off
    assert cfg.explore == 0.0
