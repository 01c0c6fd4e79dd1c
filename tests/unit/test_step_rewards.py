"""trainer.rl.rewards: a MiniWoB++ episode's scored reward sits on its last step; a game's steps
carry their score changes on the normalised scale, and every episode's rewards sum to its scored
reward (a game's less a constant: the random policy's mean score, on the normalised scale)."""

from __future__ import annotations

import math
import random

import pytest

from producers.games import GAMES
from tests.fakes.run import episode, scored, trajectory
from trainer.rl.rewards import score_scale, step_rewards


def scored_episode(task: str, step_rewards_env: list[float], suite: str = "miniwob"):
    traj = trajectory(episode("e1", task, 0, len(step_rewards_env), True, 1.0e9, random.Random(0)))
    steps = [s.model_copy(update={"reward": r}) for s, r in zip(traj.steps, step_rewards_env)]
    update = {"steps": steps, "task": traj.task.model_copy(update={"suite": suite})}
    if task in GAMES:  # as the sandbox ends a game: its final and normalised score, the outcome
        g, score = GAMES[task], sum(step_rewards_env)
        norm = (score - g.random_mean) / (g.reference_mean - g.random_mean)
        update |= {"score": score, "normalised_score": norm, "outcome_reward": norm}
    return scored(traj.model_copy(update=update))


def test_miniwob_reward_arrives_at_the_end():
    s = scored_episode("click-button-sequence", [0.0, 0.0, 1.0])
    assert step_rewards(s) == [0.0, 0.0, s.reward]


@pytest.mark.parametrize("game", sorted(GAMES))
def test_game_steps_carry_their_score_changes(game):
    changes = [0.0, 4.0, 0.0, 8.0, 1.0, 0.0]
    s = scored_episode(game, changes, suite="games")
    rewards = step_rewards(s)
    g = GAMES[game]
    scale = 1.0 / (g.reference_mean - g.random_mean)
    assert score_scale(game) == pytest.approx(scale)
    assert rewards[:-1] == pytest.approx([c * scale for c in changes[:-1]])  # each where it was scored
    other = s.reward - s.components["outcome"]  # format, length, ...: at the end
    assert rewards[-1] == pytest.approx(changes[-1] * scale + other) and other != 0.0
    # the score changes stand for the outcome: the sum is the scored reward plus a constant per game
    assert s.components["outcome"] == pytest.approx(s.trajectory.normalised_score)
    assert math.fsum(rewards) == pytest.approx(s.reward + g.random_mean * scale, abs=1e-9)


def test_unknown_task_has_no_scale():
    assert score_scale("click-button") is None


def test_a_game_the_judge_decided_learns_the_judges_reward_alone():
    """The judge's outcome stands for the game's score: its steps carry no score change (the page's
    own reward, a label), and the rewards sum to the scored reward, the judge's outcome counted once."""
    from streams.score import make_scorer

    class Fixed:
        def judge(self, traj):
            return 0.25

    game = sorted(GAMES)[0]
    plain = scored_episode(game, [0.0, 4.0, 0.0, 8.0], suite="games")
    judged = make_scorer("rule-v1", Fixed(), frozenset({game})).score(plain.trajectory, 0.0)
    assert judged.judged and not plain.judged and "outcome" not in judged.components
    rewards = step_rewards(judged)
    assert rewards[:-1] == [0.0, 0.0, 0.0] and rewards[-1] == pytest.approx(judged.reward)
    assert step_rewards(plain)[1] != 0.0  # unjudged, the score changes stay where they were scored
