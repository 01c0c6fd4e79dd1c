"""Preference pairs as each policy kind scores them: one state, two actions, two log-probs.

Each kind builds them (``PolicyKind.dpo_pairs``: trainer.policies.pixel.pairs,
trainer.policies.lm.pairs) as an object with ``__len__``, ``subset``, ``logprobs(policy, idx)``
(log pi of each chosen and rejected side) and ``chosen_tokens(idx)``, which trainer.dpo.train uses.

A pair a policy cannot score is skipped and counted by reason: no rejected side (a
post-reflection pair whose episode stopped at the error), an action outside the policy's heads,
two sides that are one decision for the policy (two clicks in one grid cell), a screenshot no
longer in the blob store.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from infra.runtime.policy import policy_kind
from schemas.blobs import BlobStore
from schemas.events import PreferencePair


def pair_inputs(policy, pairs: list[PreferencePair], store: BlobStore) -> tuple[Any | None, Counter]:
    """The pairs ``policy`` can score, as its inputs (None when there is none), and the skipped by reason."""
    return policy_kind(policy.kind).dpo_pairs(policy, pairs, store)
