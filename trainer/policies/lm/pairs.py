"""Preference pairs as the language policy scores them (trainer.dpo.inputs): the state is the
UI-TARS context rollout sampled in (schemas.prompt: instruction, earlier screenshots and
assistant turns, the current screenshot), and each side is the text the policy would write: the
agent's recorded output for the rejected side (rebuilt from its action when there is none), the
chosen action rendered as ``Thought: ... / Action: ...`` in the policy's coordinate mode; its
log-prob is the sum over its tokens, ``<|im_end|>`` included."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import torch

from infra.runtime.policy import PolicyInput, screen
from schemas.blobs import BlobNotFound, BlobStore
from schemas.events import PairSide, PreferencePair
from schemas.prompt import Rendered, history_window
from schemas.uitars import render_output


@dataclass
class LMPairs:
    """Per pair, the context followed by each side's text (``Rendered``, the side's tokens scored)."""

    chosen: list[Rendered]
    rejected: list[Rendered]

    def __len__(self) -> int:
        return len(self.chosen)

    def subset(self, idx: list[int]) -> "LMPairs":
        return LMPairs([self.chosen[i] for i in idx], [self.rejected[i] for i in idx])

    def logprobs(self, policy, idx: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        logprob, _, _ = policy.evaluate([self.chosen[i] for i in idx] + [self.rejected[i] for i in idx])
        logprob = logprob.cpu()  # the pairs' other tensors live on the CPU; the model may not (gradients flow back)
        return logprob[:len(idx)], logprob[len(idx):]

    def chosen_tokens(self, idx: list[int]) -> torch.Tensor:
        """Scored tokens of each chosen side [n] (its reply's tokens)."""
        return torch.tensor([float(sum(self.chosen[i].target)) for i in idx])


def side_text(side: PairSide, width: int, height: int, coord_mode: str) -> str | None:
    """What a language policy writes for this side (None: nothing to score)."""
    if side.raw_output:
        return side.raw_output
    if side.action is None:
        return None
    return render_output(side.thought, side.action, width, height, coord_mode)


def lm_pairs(policy, pairs: list[PreferencePair], store: BlobStore) -> tuple[LMPairs | None, Counter]:
    chosen, rejected, skipped = [], [], Counter()
    mode = policy.config["coord_mode"]
    for p in pairs:
        obs = p.observation
        if p.rejected is None:
            skipped["no_rejected_side"] += 1
            continue
        good = side_text(p.chosen, obs.screen_width, obs.screen_height, mode)
        bad = side_text(p.rejected, obs.screen_width, obs.screen_height, mode)
        if good is None or bad is None:
            skipped["unrepresentable"] += 1
            continue
        if policy.model_text(good) == policy.model_text(bad):
            skipped["indistinguishable"] += 1  # e.g. two clicks in one patch of a pointer policy
            continue
        try:
            image = screen(store, obs.screenshot)
            keep = set(history_window(policy.spec, len(p.history)))
            earlier = [screen(store, s.observation.screenshot) if i in keep else None
                       for i, s in enumerate(p.history)]
        except BlobNotFound:
            skipped["screenshot_missing"] += 1
            continue
        inp = PolicyInput(image, obs.instruction, obs.screen_width, obs.screen_height, history=list(p.history))
        turns = policy.context_with_images(inp, earlier)
        chosen.append(policy.render(turns, good, score="last"))
        rejected.append(policy.render(turns, bad, score="last"))
    if not chosen:
        return None, skipped
    return LMPairs(chosen, rejected), skipped
