"""Continual pre-training samples from flywheel.ct.v1: the plain LM loss over a whole rendered
trajectory (prompt, instruction, every Thought / Action, with the last N screenshots as context).
CT data are the trajectories judged not good enough to imitate (V(s) = 0): the model learns the
environment's language and dynamics from them without being told to copy the actions. The
streaming loop is trainer.lm_stream.
"""

from __future__ import annotations

from schemas.events import ScoredTrajectory
from trainer.policies.lm_text import Rendered, render, uitars_turns
from trainer.sft import ImageLoader


def ct_samples(policy, scored: ScoredTrajectory, load_image: ImageLoader) -> list[Rendered]:
    """One sample per trajectory; every text token is scored, image placeholders are not."""
    steps = scored.trajectory.steps
    if not steps:
        return []
    images = [load_image(s.observation.screenshot) for s in steps]
    instruction = steps[0].observation.instruction or scored.trajectory.task.name
    turns = uitars_turns(instruction, steps, images, None, policy.config["max_images"], policy.prompt,
                         policy.config["coord_mode"])
    return [render(turns, policy.tok, policy.vision.n_tokens, open_assistant=False, score="text")]
