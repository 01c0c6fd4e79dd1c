"""How the language policy is configured for MiniWoB++ tasks, over its base
(trainer.sft.lm_config.PRETRAINED_LM, whose pointer the reading weighs)."""

from __future__ import annotations

from typing import Any

# How the policy reads MiniWoB++ pages (trainer.policies.lm.ground): match the instruction's
# words in the page's font (the defaults are MiniWoB's).
MINIWOB_READING: dict[str, Any] = {"ground": True}


def lm_config(overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """``MINIWOB_READING`` under ``overrides``; a policy told ``"pointer": false`` has no pointer
    to weigh, so it reads nothing more."""
    overrides = overrides or {}
    return dict(overrides) if overrides.get("pointer", True) is False else {**MINIWOB_READING, **overrides}
