"""SFT samples from flywheel.sft.v1: the next-token loss on each step's "Thought / Action" turn,
given exactly the context the policy saw when it acted (UI-TARS multi-turn: last N screenshots,
every earlier action). The streaming loop is trainer.sft.lm_stream; this module only says what is
trained on.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from schemas.events import ScoredTrajectory
from infra.runtime.policy import state_at
from schemas.prompt import Rendered

ImageLoader = Callable[[Any], "np.ndarray | None"]


def sft_samples(policy, scored: ScoredTrajectory, load_image: ImageLoader) -> list[Rendered]:
    """One sample per step: its context, and its assistant turn as the only scored tokens.

    A step whose screenshot cannot be loaded is skipped (it would teach the wrong context);
    a step without a parsed action still teaches its text only if the model wrote it; a
    demonstration's injected noise (``Trajectory.noise_steps``) stays context, never a sample.
    """
    steps, noise = scored.trajectory.steps, set(scored.trajectory.noise_steps)
    images = [load_image(s.observation.screenshot) for s in steps]
    samples = []
    for i, step in enumerate(steps):
        if images[i] is None or (step.action is None and not step.raw_output) or step.step_index in noise:
            continue
        inp = state_at(steps, i, images[i], scored.trajectory.task.name)
        turns = policy.context_with_images(inp, images[:i])
        samples.append(policy.render(turns, policy.taught_text(step), score="last"))
    return samples
