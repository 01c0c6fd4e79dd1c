"""Behaviour cloning of the language policy: the cold start's SFT for ``flywheel bc --policy-kind lm``.

The same demonstrations as the pixel policy's (trainer.sft.bc: a snapshot of flywheel.sft.v1, the
first ``demos_per_task`` per task), rendered by ``trainer.sft.sft_samples.sft_samples`` in the one context
format the policy acts in (the assistant's "Thought / Action" turn is the only scored text),
trained for ``epochs`` passes with ``trainer.sft.lm_stream.train_step``, published as one version.

The patch adapter and the value head start from scratch: they train at ``adapter_lr_mult``
times the LM's learning rate (LLaVA trains its projector the same way).

Grounding augmentation (trainer.core.augment, off by default): the first step of each
demonstration (no earlier screenshot in its context) also gives ``shift_copies`` translated
copies of its screen and click. Measured on click-test (docs/language-policy.md) it did not
raise greedy success and made SFT six times longer, so it stays an option.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from typing import Any

import numpy as np

from infra.runtime.config import ConfigError
from infra.runtime.policy import screen_or_none, state_at
from schemas.blobs import BlobStore
from schemas.events import ScoredTrajectory
from schemas.prompt import Rendered, format_step_output
from trainer.core.augment import random_shifts
from trainer.sft.sft_samples import sft_samples
from trainer.core import metric_names as M
from trainer.sft.lm_config import LMTrainConfig


def load_image(store: BlobStore):
    """A screenshot loader for sft_samples: a missing screenshot skips its step."""
    return lambda ref: screen_or_none(store, ref)


def shifted_samples(policy, scored: ScoredTrajectory, image: np.ndarray, copies: int, max_frac: float,
                    rng: random.Random) -> list[Rendered]:
    """Translated copies of the trajectory's first step (its screen and its click moved together)."""
    step = scored.trajectory.steps[0]
    obs, out = step.observation, []
    for moved_image, moved in random_shifts(image, step.action, copies, max_frac, rng):
        inp = state_at(scored.trajectory.steps, 0, moved_image, scored.trajectory.task.name)
        text = format_step_output(step.model_copy(update={"action": moved, "raw_output": None}), policy.config["coord_mode"])
        out.append(policy.render(policy.context(inp), text, score="last"))
    return out


def lm_examples(policy, demos: list[ScoredTrajectory], store: BlobStore, copies: int, max_frac: float,
                seed: int) -> tuple[list[Rendered], Counter]:
    """Every demonstrated step in its context, plus the first steps' translated copies;
    -> (samples, skipped counts)."""
    load, rng = load_image(store), random.Random(seed)
    samples: list[Rendered] = []
    skipped: Counter = Counter()
    for s in demos:
        rendered = sft_samples(policy, s, load)
        noise = len(s.trajectory.noise_steps)
        if noise:
            skipped["noise_steps"] += noise
        if len(rendered) < len(s.trajectory.steps) - noise:
            skipped["screenshot_missing"] += len(s.trajectory.steps) - noise - len(rendered)
        samples += rendered
        first = s.trajectory.steps[0]
        image = (load(first.observation.screenshot)
                 if copies and first.action is not None and first.step_index not in s.trajectory.noise_steps else None)
        if image is not None:
            samples += shifted_samples(policy, s, image, copies, max_frac, rng)
    if not samples:
        raise ConfigError(f"no demonstration this policy can learn from (skipped: {dict(skipped) or 'none found'})")
    return samples, skipped


def lm_train(policy, samples: list[Rendered], epochs: int, lr: float, batch: int, minibatch: int,
             seed: int = 0, progress=None, adapter_lr_mult: float = 1.0, budget_s: float = 0.0) -> list[float]:
    """``epochs`` shuffled passes of ``train_step``; -> the mean loss per epoch. ``budget_s`` > 0: no
    epoch starts once training has taken that long (the first always runs)."""
    import torch

    # local: loads Pillow, confluent-kafka, torch, needed only on this path
    from trainer.sft.lm_stream import train_step

    cfg = LMTrainConfig(lr=lr, minibatch_samples=minibatch)
    optimizer = torch.optim.AdamW(policy.param_groups(lr, adapter_lr_mult), lr=lr)
    rng, losses = random.Random(seed), []
    policy.train()
    t0 = time.monotonic()
    for epoch in range(epochs):
        if losses and budget_s > 0 and time.monotonic() - t0 >= budget_s:
            break
        order = list(range(len(samples)))
        rng.shuffle(order)
        total = 0.0
        for i in range(0, len(order), batch):
            chunk = [samples[j] for j in order[i:i + batch]]
            total += train_step(policy, optimizer, chunk, cfg)[M.SFT_LOSS] * len(chunk)
        losses.append(total / len(samples))
        if progress is not None:
            progress(epoch + 1, losses[-1])
    policy.eval()
    return losses


def clone_lm(policy, demos: list[ScoredTrajectory], store: BlobStore, cfg) -> dict[str, Any]:
    """Train ``policy`` on ``demos`` as ``cfg`` (a BCConfig) says; -> what it trained on and the losses."""
    import logging

    log = logging.getLogger("flywheel.bc")
    samples, skipped = lm_examples(policy, demos, store, cfg.shift_copies, cfg.shift_frac, cfg.seed)
    log.info("language policy: %d samples (%d translated copies) from %d demonstrations", len(samples),
             len(samples) - sum(len(d.trajectory.steps) for d in demos) + sum(skipped.values()), len(demos))
    losses = lm_train(policy, samples, cfg.epochs_for("lm"), cfg.lr_for("lm"), cfg.minibatch_for("lm"),
                      min(cfg.minibatch_for("lm"), 4), cfg.seed,
                      progress=lambda e, loss: log.info("epoch %d: loss %.3f", e, loss),
                      adapter_lr_mult=cfg.adapter_lr_mult, budget_s=cfg.train_budget_s)
    return {"samples": len(samples), "skipped": dict(skipped), "losses": losses}
