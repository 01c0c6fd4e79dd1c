"""Preference pairs as the pixel policy scores them (trainer.dpo.inputs): the state is the
screenshot with the history planes drawn from the pair's recorded steps (``preprocess``, as
``step_inputs`` rebuilds a trajectory's steps); each side's log-prob is ``evaluate``'s, the sum
over the action's factors."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import torch

from infra.runtime.policy import screen
from schemas.blobs import BlobNotFound, BlobStore
from schemas.events import PreferencePair


@dataclass
class PixelPairs:
    """obs [N, C + 3, 8G, 8G] uint8 (one state per pair) and N instructions, chosen and rejected actions."""

    obs: torch.Tensor
    instructions: list[str]
    chosen: list[Any]
    rejected: list[Any]

    def __len__(self) -> int:
        return len(self.chosen)

    def subset(self, idx: list[int]) -> "PixelPairs":
        return PixelPairs(self.obs[idx], [self.instructions[i] for i in idx], [self.chosen[i] for i in idx],
                          [self.rejected[i] for i in idx])

    def logprobs(self, policy, idx: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """(log pi(chosen | s) [n], log pi(rejected | s) [n]) of pairs ``idx``, one forward pass."""
        obs, instr = self.obs[idx], [self.instructions[i] for i in idx]
        logprob, _, _ = policy.evaluate(torch.cat([obs, obs]), instr + instr,
                                        [self.chosen[i] for i in idx] + [self.rejected[i] for i in idx])
        return logprob[:len(idx)], logprob[len(idx):]

    def chosen_tokens(self, idx: list[int]) -> torch.Tensor:
        """Scored units of each chosen side [n]: one action each."""
        return torch.ones(len(idx))


def pixel_pairs(policy, pairs: list[PreferencePair], store: BlobStore) -> tuple[PixelPairs | None, Counter]:
    obs, instructions, chosen, rejected, skipped = [], [], [], [], Counter()
    for p in pairs:
        instruction = p.observation.instruction
        if p.rejected is None:
            skipped["no_rejected_side"] += 1
            continue
        good, bad = p.chosen.action, p.rejected.action
        if not (policy.can_represent(good, instruction) and policy.can_represent(bad, instruction)):
            skipped["unrepresentable"] += 1
            continue
        if policy.discretize(good) == policy.discretize(bad):
            skipped["indistinguishable"] += 1
            continue
        try:
            image = screen(store, p.observation.screenshot)
        except BlobNotFound:
            skipped["screenshot_missing"] += 1
            continue
        obs.append(policy.preprocess(image, p.history, instruction))
        instructions.append(instruction)
        chosen.append(good)
        rejected.append(bad)
    if not obs:
        return None, skipped
    return PixelPairs(torch.stack(obs), instructions, chosen, rejected), skipped
