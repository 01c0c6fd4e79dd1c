"""The per-step rewards PPO trains on: the scored reward of an episode, spread over its steps.

A MiniWoB++ episode has one reward, at its end, so the scored reward (outcome + format + length
+ shaping, streams.score) goes on the last step. A game's steps each carry a reward of their own,
the change of the score, and over 50-500 steps an end-only reward leaves the critic to find which
moves scored. So on a game each step gets its score change on the normalised scale (divided by the
reference's mean minus the random policy's, producers.games.registry), and the last step what is
left of the scored reward: the rewards still sum to exactly the scored reward, which for a game is
its normalised score (0 = random, 1 = reference) plus the scorer's other components.
"""

from __future__ import annotations

from producers.games import GAMES
from schemas.events import ScoredTrajectory


def score_scale(task_name: str) -> float | None:
    """Reward per point of score for a game's task (1 / (reference mean - random mean)); None
    for a task without a score."""
    game = GAMES.get(task_name)
    return None if game is None else 1.0 / (game.reference_mean - game.random_mean)


def step_rewards(scored: ScoredTrajectory) -> list[float]:
    """One reward per step of ``scored.trajectory``, summing to ``scored.reward``."""
    steps = scored.trajectory.steps
    scale = score_scale(scored.trajectory.task.name)
    rewards = [0.0] * len(steps) if scale is None else [s.reward * scale for s in steps]
    rewards[-1] += scored.reward - sum(rewards)
    return rewards
