"""The games suite in the real browser sandbox (headless Chromium, fake clock): every game starts
from its seed alone, its score reaches the steps as rewards and the ended event as the final and
normalised score, and its heuristic player beats the random policy."""

from __future__ import annotations

import random

import pytest

from tests.e2e.browser_support import browser_sandbox

from producers import scripted
from producers.episode import run_episode
from producers.games import GAMES, get_game, normalised_score
from producers.policy_client import ScriptedClient
from producers.sandboxes.miniwob_server import TASK_HEIGHT, TASK_WIDTH
from schemas.events import EpisodeEnded, Step, TaskSpec

pytestmark = pytest.mark.e2e

BOARD_JS = "flywheelGame.board()"
# a few full episodes per policy (snake: its first 80 steps), on seeds apart from the benchmark's;
# 2048's episodes are the longest (about 130 steps at random, 190 for the heuristic)
SEEDS = {"games.2048": (1, 2), "games.mines": (1, 2, 3, 4), "games.snake": (1, 2, 3)}
CAP = {"games.snake": 80}


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    yield from browser_sandbox(tmp_path_factory)


def task(name: str, seed: int) -> TaskSpec:
    return TaskSpec(task_id=f"{name}-{seed}", suite="games", name=name, seed=seed, max_steps=500)


def play(loop, sandbox, name: str, seed: int, policy: str, cap: int) -> float:
    """One episode (at most ``cap`` steps) -> its final score; every step's reward is the score's change."""
    game, rng = get_game(name), random.Random(seed)
    loop.run(sandbox.reset(task(name, seed)))
    total = 0.0
    for _ in range(cap):
        board = loop.run(sandbox.query(BOARD_JS))
        result = loop.run(sandbox.step(game.player(board) if policy == "heuristic" else game.random_action(rng, board)))
        assert result.error is None
        total += result.reward
        assert result.score == total == board["score"] + result.reward
        if result.done:
            break
    return result.score


@pytest.mark.parametrize("name", sorted(GAMES))
def test_a_game_starts_from_its_seed_alone(env, name):
    loop, sandbox = env
    game = get_game(name)
    first = loop.run(sandbox.reset(task(name, 7)))
    assert first.image.shape == (TASK_HEIGHT, TASK_WIDTH, 3)
    assert first.observation.instruction == game.instruction
    board = loop.run(sandbox.query(BOARD_JS))
    assert board["score"] == 0 and not board["over"]
    for _ in range(3):  # play a little, so the next reset has something to undo
        loop.run(sandbox.step(game.player(loop.run(sandbox.query(BOARD_JS)))))
    again = loop.run(sandbox.reset(task(name, 7)))
    assert again.observation.screenshot.sha256 == first.observation.screenshot.sha256
    assert loop.run(sandbox.query(BOARD_JS)) == board
    others = {loop.run(sandbox.reset(task(name, seed))).observation.screenshot.sha256 for seed in (8, 9, 10)}
    assert first.observation.screenshot.sha256 not in others and len(others) > 1


@pytest.mark.parametrize("name", sorted(GAMES))
def test_a_seed_and_the_same_actions_replay_the_same_game_step_by_step(env, name):
    """Not only the first board: the tiles 2048 spawns, the apples snake places as the page clock
    moves it, the board mines reveals come from the seed and the actions alone."""
    loop, sandbox = env
    game = get_game(name)

    def replay() -> list:
        # the heuristic's moves, then random ones among them (the same each time; late, as a random
        # click in mines often hits a mine)
        rng = random.Random(11)
        loop.run(sandbox.reset(task(name, 21)))
        seen = []
        for k in range(25):
            board = loop.run(sandbox.query(BOARD_JS))
            act = game.random_action(rng, board) if k % 3 == 2 and k > 12 else game.player(board)
            result = loop.run(sandbox.step(act))
            assert result.error is None, result.error
            seen.append((board, result.reward, result.score, result.done, result.obs.observation.screenshot.sha256))
            if result.done:
                break
        return seen

    first, second = replay(), replay()
    assert len(first) > 1 and first == second
    assert len({s[4] for s in first}) > 1  # the screen changed along the way: a replay of something


@pytest.mark.parametrize("name", sorted(GAMES))
def test_the_heuristic_beats_the_random_policy(env, name):
    loop, sandbox = env
    cap = CAP.get(name, get_game(name).max_steps)
    heuristic = [play(loop, sandbox, name, seed, "heuristic", cap) for seed in SEEDS[name]]
    chance = [play(loop, sandbox, name, seed, "random", cap) for seed in SEEDS[name]]
    assert sum(heuristic) > sum(chance), (heuristic, chance)


def test_an_episode_of_the_demonstrator_carries_its_score_to_the_ended_event(env):
    loop, sandbox = env
    name = "games.mines"
    events: list = []
    result = loop.run(run_episode(task(name, 4), sandbox, ScriptedClient(), events.append, sandbox_name="browser",
                                  worker_id="w"))
    steps = [e for e in events if isinstance(e, Step)]
    ended = events[-1]
    assert isinstance(ended, EpisodeEnded) and ended.reason == "done" and result.status == "ended"
    assert steps and all(s.action is not None and s.action.type == "click" for s in steps)
    assert ended.score == sum(s.reward for s in steps) > 0
    assert ended.normalised_score == pytest.approx(normalised_score(get_game(name), ended.score))
    assert ended.outcome_reward == ended.normalised_score and ended.success == (ended.normalised_score >= 1)
    assert scripted.thought(steps[0].action) == steps[0].thought


def test_a_snake_moves_on_the_page_clock_without_input(env):
    loop, sandbox = env
    loop.run(sandbox.reset(task("games.snake", 5)))
    heads = []
    for _ in range(3):
        loop.run(sandbox.step(None))  # no action: the clock alone moves the snake, one cell a step
        heads.append(tuple(loop.run(sandbox.query(BOARD_JS))["snake"][0]))
    assert [h[0] for h in heads] == [5, 6, 7] and len({h[1] for h in heads}) == 1


