"""DAgger rounds inside the PPO trainer: imitation of an expert's labels on the policy's own states.

The rollout workers (``flywheel rollout --expert-labels``) record on each step of a task with a
scripted solver what the solver would have done on the screen the policy reached
(``Step.expert_action``); the policy itself acted. ``expert_coef`` imitates those labels beside
PPO's loss, at PPO's rate and within its epochs; a round here is DAgger's own step (Ross et al.,
2011): the labelled states of the episodes the trainer has trained on are aggregated
(``LabelBuffer``: at most ``size`` of them, each task's newest, shared among the tasks) and, every
``dagger_every`` PPO updates, the current weights are fitted to them by maximum likelihood
(``trainer.sft.bc``'s loss, with an optimiser of its own, as an RFT round) before the version is
published.

Why a round and not only the term: on the games the term rode PPO's small steps (lr 3e-4, about
15 updates in a 30-minute run) and the labels' NLL stayed at 0.6-1.0 nats per step (docs/tasks.md);
a snake clone that agrees with its heuristic on 3 steps in 4 dies within a few turns.

What it does not keep: the buffer lives in the trainer's memory. A restarted trainer aggregates
again from the episodes it trains on next (the labels are in ClickHouse's ``steps.expert_action``
and on flywheel.steps.v1 for a reader that wants them all). Like an RFT round, the value head is
not trained and the version's PPO metrics describe the update before the round.
"""

from __future__ import annotations

import logging
import random
import time
from collections import deque
from typing import Any

import torch

from trainer.core import metric_names as M
from trainer.sft.bc import Examples
from trainer.sft.rft import fine_tune

log = logging.getLogger("flywheel.dagger")


class LabelBuffer:
    """Each task's newest labelled steps (policy input, instruction, expert action, task) of the
    episodes trained on, at most ``size`` in all, shared among the tasks: when it is full the
    task holding the most steps gives up its oldest. A game of long episodes would otherwise
    crowd out the others (g49 seed 2: 2048's ~180-step episodes held most of the buffer while
    snake's labels, the ones its clone most needs, were a minority). An unlabelled step is not
    kept."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"a label buffer holds at least one step, got size={size}")
        self.size = size
        self.by_task: dict[str, deque[tuple[torch.Tensor, str, Any, str]]] = {}

    def __len__(self) -> int:
        return sum(map(len, self.by_task.values()))

    def add(self, inputs: list[torch.Tensor], instructions: list[str], experts: list[Any] | None, task: str) -> int:
        """One episode's steps (``experts``: per step the label or None; None: no step has one);
        -> how many it added."""
        added = 0
        for obs, instruction, label in zip(inputs, instructions, experts or []):
            if label is not None:
                self.by_task.setdefault(task, deque()).append((obs, instruction, label, task))
                added += 1
                if len(self) > self.size:
                    max(self.by_task.values(), key=len).popleft()
        return added

    def shares(self) -> dict[str, int]:
        """Steps held per task."""
        return {task: len(steps) for task, steps in self.by_task.items()}

    def examples(self, sample: int = 0, seed: int = 0) -> Examples:
        """The buffer's steps, or ``sample`` of them drawn without replacement (0: all), in
        buffer order (task by task, oldest first)."""
        steps = [step for held in self.by_task.values() for step in held]
        if 0 < sample < len(steps):
            steps = [steps[i] for i in sorted(random.Random(seed).sample(range(len(steps)), sample))]
        obs, instructions, actions, tasks = zip(*steps)
        return Examples(torch.stack(list(obs)), list(instructions), list(actions), list(tasks))


def dagger_round(policy, buffer: LabelBuffer, epochs: int, lr: float, minibatch_size: int, seed: int,
                 sample: int = 0) -> dict[str, float]:
    """Fit the current weights to the buffer's labels (``sample`` of them drawn at random; 0: all);
    -> the round's metrics (empty when the buffer holds none): the labels' mean NLL in the first
    and the last epoch, the steps fitted, seconds."""
    if not len(buffer):
        return {}
    t0 = time.monotonic()
    data = buffer.examples(sample, seed)
    losses = fine_tune(policy, data, epochs, lr, minibatch_size, seed)
    seconds = time.monotonic() - t0
    log.info("DAgger: %d of %d labelled steps (held per task: %s), %d epoch(s), NLL %.3f -> %.3f in %.1fs",
             len(data.actions), len(buffer), buffer.shares(), epochs, losses[0], losses[-1], seconds)
    return {M.DAGGER_LOSS_FIRST: losses[0], M.DAGGER_LOSS: losses[-1], M.DAGGER_STEPS: float(len(data.actions)),
            M.DAGGER_TIME_S: seconds}
