"""DART-style noise in the games' demonstrations (producers.policy_client.noise_move): which steps
the scripted demonstrator leaves to chance, which mistakes it draws (``Game.mistakes``), how they
are recorded (sampled, with the draw's log-prob) and that behaviour cloning keeps them as history, never as labels."""

from __future__ import annotations

import asyncio
import math

import numpy as np
import pytest

from infra.runtime.config import ConfigError
from infra.runtime.errors import UserError
from infra.runtime.policy import Decision
from producers.episode import run_episode
from producers.annotate import skip_reason
from producers.cli import make_policy_client
from producers.games.mines import guesses
from producers.games.mines import player as mines_player
from producers.games.registry import ARROWS, click_cell
from producers.games.snake import turns
from producers.games.twenty48 import slides
from producers.policy_client import PolicyClient, PolicyReply, PolicyRequest, ScriptedClient, noise_move
from producers.rollout import RolloutConfig
from schemas.actions import Click, Hotkey
from schemas.blobs import BlobStore
from schemas.events import TaskSpec
from tests.fakes.clicks import make_episode, scored_trajectory
from tests.unit.test_producers_episode import Sandbox, obs

SNAKE = {"size": 10, "cell": 16, "snake": [[4, 5], [3, 5], [2, 5]], "apple": [8, 5], "dir": [1, 0]}
MINES = {"rows": ["#####", "#####", "#####"], "mines": 3, "cell": 16,
         "view": {"x": 0, "y": 50, "width": 160, "height": 210}}


def request(name: str, step: int, board: dict | None, seed: int = 7) -> PolicyRequest:
    task = TaskSpec(task_id="t", suite="games", name=name, seed=seed, max_steps=300)
    return PolicyRequest(task=task, obs=obs(step), step_index=step, dom={"game": board} if board else {})


def test_a_step_is_noise_with_the_asked_chance_and_the_same_on_a_retry():
    drawn = [noise_move(request("games.snake", k, SNAKE), 0.3) for k in range(1, 601)]
    noisy = [d for d in drawn if d is not None]
    assert 0.24 < len(noisy) / len(drawn) < 0.36
    # a uniform draw of the moves that do not lose at once (left is back onto the snake), less the
    # heuristic's own (right, towards the apple)
    assert {d.action.key for d in noisy} == {"up", "down"}
    assert all(d.logprob == pytest.approx(-math.log(2)) for d in noisy)
    again = [noise_move(request("games.snake", k, SNAKE), 0.3) for k in range(1, 601)]
    assert [d and d.action for d in drawn] == [d and d.action for d in again]  # a function of seed and step
    other_seed = [noise_move(request("games.snake", k, SNAKE, seed=8), 0.3) for k in range(1, 601)]
    assert [d is None for d in drawn] != [d is None for d in other_seed]


def test_the_first_step_is_always_the_demonstrators():
    """So a noisy trajectory always holds an unsampled step: never mistaken for a policy's own
    sampled episode (PPO data), whose steps would all be imitated."""
    for seed in range(200):
        assert noise_move(request("games.mines", 0, MINES, seed=seed), 0.99) is None
    assert all(noise_move(request("games.snake", 0, SNAKE, seed=seed), 0.99) is None for seed in range(200))


def test_a_mistake_never_loses_at_once_or_wastes_the_turn_where_the_game_can_tell():
    at_wall = {**SNAKE, "snake": [[9, 5], [8, 5], [7, 5]]}
    assert [a.key for a in turns(at_wall)] == ["up", "down"]
    boxed = {**SNAKE, "size": 3, "snake": [[2, 1], [1, 1], [1, 0], [2, 0], [2, 2], [1, 2]], "dir": [1, 0]}
    assert [a.key for a in turns(boxed)] == list(ARROWS)  # every move loses: any arrow
    corner = {"grid": [[0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0], [2, 0, 0, 0]]}
    assert sorted(a.key for a in slides(corner)) == ["right", "up"]  # down and left move no tile
    full = {"grid": [[2, 4, 2, 4], [4, 2, 4, 2], [2, 4, 2, 4], [4, 2, 4, 2]]}
    assert len(slides(full)) == 4  # nothing moves: any arrow
    opened = {**MINES, "rows": ["1####", "#####", "#####"]}
    assert len(guesses(opened)) == 14 and click_cell(opened, 0, 0) not in guesses(opened)  # hidden cells only
    certain = {**MINES, "rows": ["1#", "11"]}  # the 1s name (0, 1) a mine: no guess left
    assert guesses(certain) == []
    assert all(noise_move(request("games.mines", k, certain), 0.9) is None for k in range(1, 50))


def test_no_noise_unasked_outside_the_games_or_without_a_board():
    assert all(noise_move(request("games.snake", k, SNAKE), 0.0) is None for k in range(200))
    assert all(noise_move(request("click-test", k, SNAKE), 0.5) is None for k in range(200))
    assert all(noise_move(request("games.snake", k, None), 0.5) is None for k in range(200))


def test_a_click_games_noise_is_another_hidden_cell_with_its_log_prob():
    noisy = [d for d in (noise_move(request("games.mines", k, MINES), 0.5) for k in range(1, 100)) if d is not None]
    own = mines_player(MINES)
    assert noisy and all(isinstance(d.action, Click) and d.action != own for d in noisy)
    assert all(d.logprob == pytest.approx(-math.log(14)) for d in noisy)  # 15 hidden cells less the heuristic's


def test_the_scripted_client_marks_its_noise_sampled_and_its_own_moves_not():
    client = ScriptedClient("scripted-p", noise=0.5)
    replies = [asyncio.run(client.act(request("games.snake", k, SNAKE))) for k in range(1, 60)]
    noise = [r for r in replies if r.sampled]
    own = [r for r in replies if r.sampled is None]
    assert noise and own and len(noise) + len(own) == len(replies)
    assert all(r.decision.action == Hotkey(key="right") and r.decision.logprob == 0.0 for r in own)  # the heuristic
    with pytest.raises(UserError, match=r"\[0, 1\)"):
        ScriptedClient("s", noise=1.0)


def test_noise_is_asked_of_the_scripted_backend_only_and_in_range():
    assert RolloutConfig(policy_backend="scripted", demo_noise=0.1, sandboxes=1).demo_noise == 0.1
    with pytest.raises(ConfigError, match="scripted"):
        RolloutConfig(policy_backend="torch", demo_noise=0.1, sandboxes=1)
    for bad in (-0.1, 1.0):
        with pytest.raises(ConfigError, match=r"\[0, 1\)"):
            RolloutConfig(policy_backend="scripted", demo_noise=bad, sandboxes=1)
    client = make_policy_client(RolloutConfig(policy_backend="scripted", demo_noise=0.2, sandboxes=1), None)
    assert isinstance(client, ScriptedClient) and client.noise == 0.2


class NoisyOnOdd(PolicyClient):
    """A demonstrator (not sampled) whose odd steps are draws."""

    sampled = False

    async def act(self, request):
        decision = Decision(action=Click(x=0.5, y=0.5), logprob=-1.0 if request.step_index % 2 else 0.0)
        return PolicyReply(decision, self.version, sampled=True if request.step_index % 2 else None)


def test_the_step_records_the_replys_own_sampled_flag():
    events = []
    task = TaskSpec(task_id="t1", suite="miniwob", name="click-test", max_steps=4, timeout_s=60.0)
    asyncio.run(run_episode(task, Sandbox(), NoisyOnOdd("scripted-p"), events.append, sandbox_name="browser",
                            worker_id="w"))
    steps = [e for e in events if e.kind == "step"]
    assert [s.sampled for s in steps] == [False, True, False, True]
    assert [s.logprob for s in steps] == [0.0, -1.0, 0.0, -1.0]


def demonstration(tmp_path, sampled: list[bool]):
    """A scored click-test trajectory of len(sampled) steps, each a different click."""
    store, rng = BlobStore(str(tmp_path)), np.random.default_rng(0)
    st = scored_trajectory(make_episode("click-test", rng), Click(x=0.5, y=0.5), 0.0, "e1", "scripted-p", 0, store)
    first = st.trajectory.steps[0]
    steps = [first.model_copy(update={"step_index": i, "sampled": s, "action": Click(x=0.1 + 0.2 * i, y=0.6),
                                      "done": i == len(sampled) - 1}) for i, s in enumerate(sampled)]
    return st.model_copy(update={"trajectory": st.trajectory.model_copy(update={"steps": steps})}), store


def test_noise_steps_are_the_sampled_ones_of_a_demonstration_only(tmp_path):
    noisy = demonstration(tmp_path, [False, True, False, True])[0]
    assert noisy.trajectory.noise_steps == [1, 3]
    assert skip_reason(noisy.model_copy(update={"trajectory": noisy.trajectory.model_copy(update={"success": False})})) \
        == "noisy_demonstration"  # the reflection annotator: its mistakes are nobody's
    assert demonstration(tmp_path, [True, True, True])[0].trajectory.noise_steps == []  # a policy's own episode
    assert demonstration(tmp_path, [False, False])[0].trajectory.noise_steps == []  # a clean demonstration


def test_cloning_skips_the_noise_as_a_label_and_keeps_it_in_the_history(tmp_path):
    import torch

    from infra.runtime.policy import build_policy
    from trainer.sft.bc import examples

    demo, store = demonstration(tmp_path, [False, True, False])
    policy = build_policy("pixel", "p", {"grid": 8, "channels": [4, 8, 8]})
    data = examples(policy, [demo], store)
    steps = demo.trajectory.steps
    assert data.actions == [steps[0].action, steps[2].action]
    assert data.skipped["noise_steps"] == 1
    inputs = policy.step_inputs(demo.trajectory, store)
    assert torch.equal(data.obs[1], inputs[2])  # step 2 as it was played: after the noise click
    without = demo.trajectory.model_copy(update={"steps": [steps[0], steps[2]]})
    assert not torch.equal(data.obs[1], policy.step_inputs(without, store)[1])  # the noise click is in its history
