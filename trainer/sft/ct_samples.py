"""Continual pre-training samples from flywheel.ct.v1 (V(s) = 0: trajectories not good enough to
imitate), as UI-TARS-2 means it: broaden what the model knows of the environment without
teaching it the failed actions.

What is trained on: the screens and how they changed. A CT sample is the whole trajectory in the
policy's own context format (schemas.prompt: prompt, instruction, screenshots, every
Thought / Action) with, after each action, a ``user`` turn saying what the action did to the
screen (``transition_text``: whether the screen changed, the action's error or GUI-SDK output,
the page it led to). Only those transition turns are scored. The model (and its vision adapter,
through the screenshots it must read to predict them) learns a forward model of the GUI: given
this screen and this action, what happens next. The assistant's Thought / Action tokens are
context, never targets: imitating them would teach exactly the behaviour the verdict rejected.
The screenshots themselves are continuous embeddings, not tokens, so no next-token loss can fall
on them. The streaming loop is trainer.sft.lm_stream.
"""

from __future__ import annotations

from schemas.events import ScoredTrajectory, Step
from schemas.prompt import Rendered, Turn, render, uitars_turns
from trainer.sft.sft_samples import ImageLoader


def transition_text(step: Step, next_step: Step | None) -> str:
    """What ``step``'s action did, from what the rollout recorded (empty when nothing is known)."""
    after = step.next_screenshot_sha256 or (next_step.observation.screenshot.sha256 if next_step else None)
    lines = []
    if after is not None:
        changed = after != step.observation.screenshot.sha256
        lines.append("Observation: the screen changed." if changed else "Observation: the screen did not change.")
    if step.error:
        lines.append(f"Error: {step.error}")
    if step.output:
        lines.append(f"Output: {step.output}")
    if next_step is not None:
        page = " ".join(x for x in (next_step.observation.window_title, next_step.observation.url) if x)
        if page:
            lines.append(f"Now showing: {page}")
    return "\n".join(lines)


def ct_samples(policy, scored: ScoredTrajectory, load_image: ImageLoader) -> list[Rendered]:
    """One sample per trajectory; only the transition turns are scored (see the module docstring)."""
    steps = scored.trajectory.steps
    if not steps:
        return []
    images = [load_image(s.observation.screenshot) for s in steps]
    instruction = steps[0].observation.instruction or scored.trajectory.task.name
    spec = policy.spec
    # the policy's context for the trajectory, with every screenshot kept up to the window
    turns = uitars_turns(spec, instruction, [], [], None)
    keep_from = len(steps) - spec.max_images
    transitions: set[int] = set()  # indices of the transition turns in ``turns``
    for i, step in enumerate(steps):
        if i >= keep_from and images[i] is not None and spec.max_images > 0:
            turns.append(Turn("user", [images[i]]))
        turns.append(Turn("assistant", [policy.taught_text(step)]))
        text = transition_text(step, steps[i + 1] if i + 1 < len(steps) else None)
        if text:
            transitions.add(len(turns))
            turns.append(Turn("user", [text]))
    if not transitions:
        return []
    return [render(policy.model_turns(turns), policy.tok, policy.vision.n_tokens, open_assistant=False,
                   score=lambda i, _: i in transitions)]
