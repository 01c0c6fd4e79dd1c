"""The per-step rewards PPO trains on: the scored reward of an episode, spread over its steps.

A MiniWoB++ episode has one reward, at its end, so the scored reward (outcome + format + length
+ shaping, streams.score) goes on the last step. A game's steps each carry a reward of their own,
the change of the score, and over 50-500 steps an end-only reward leaves the critic to find which
moves scored. So on a game each step gets its score change on the normalised scale (divided by the
reference's mean minus the random policy's, producers.games.registry), and the last step the
scored reward's other components (format, length, ...). The outcome component, the normalised
score, is the sum of the score changes less the random policy's mean (on that scale): a constant
per game, the same for every episode, so leaving it out ranks no episode differently. Before, the
last step carried it: every 2048 episode ended on a reward of -1.48 whatever its play, a drop
the critic must learn to foresee at every game over and at the step limit before the policy's
advantages are clean of it (docs/tasks.md, g37a and g38a). A game the streams' judge decided
(``ScoredTrajectory.judged``) takes its scored reward on the last step, as a MiniWoB++ episode does.
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
    """One reward per step of ``scored.trajectory``: summing to ``scored.reward``, except on a
    game, where the score changes stand for the outcome component and so sum to the scored
    reward plus the random policy's mean score on the normalised scale (a constant per game).
    A game the judge decided is a MiniWoB++ episode here: its score changes are the page's own
    reward, which would count the outcome twice beside the judge's and train on the page's label."""
    steps = scored.trajectory.steps
    scale = None if scored.judged else score_scale(scored.trajectory.task.name)
    if scale is None:
        return [0.0] * (len(steps) - 1) + [scored.reward]
    rewards = [s.reward * scale for s in steps]
    rewards[-1] += scored.reward - scored.components.get("outcome", 0.0)
    return rewards

