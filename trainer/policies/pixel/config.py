"""How the pixel policy is configured for the tasks of a run: what it reads on MiniWoB++ pages
and what a policy pressing arrows on a board gets beyond the model's defaults
(``trainer.policies.pixel.model.DEFAULT_CONFIG``). The tasks' own facts (the heads they need,
the keys they press) come from the caller, which knows the suites (producers.suites)."""

from __future__ import annotations

from typing import Any, Iterable

# How the policy reads MiniWoB++ pages (trainer.policies.pixel.ground): match the instruction's
# words in the page's font (the defaults, ground.PAGE_FONT and PAGE_SIZES, are MiniWoB's); its
# grid also gets its coordinates. The games have it too: no board shows its instruction's words,
# yet without the maps 2048 fell under RL on both seeds tried while it rose on all four with them
# (the maps also answer to the digits on its tiles), for 1.3x the env steps/s (docs/performance.md,
# "Text grounding on the games: cheaper without, and 2048 worse").
MINIWOB_VISION: dict[str, Any] = {"ground": True, "coords": True}

# What a policy pressing arrows on a board gets beyond the default: the last key pressed in the
# history strip (2048's clone kept pressing arrows that moved nothing without it), and a hidden
# layer between the pooled features and the heads that pick a type or a key (``head_hidden``: a
# linear read of each channel's mean and maximum cannot weigh where the snake's head is against
# the apple; docs/tasks.md, "A hidden layer for the heads"). Not the features' keypoints
# (``keypoints``) nor twice the conv widths (``channels`` [16, 32, 64]): they cloned snake better
# but cost PPO half its updates in a 30-minute run, which then ended no higher (docs/tasks.md,
# "Wider, with keypoints"). ``--policy-config`` turns them on.
ARROW_VISION: dict[str, Any] = {"last_key": True, "head_hidden": 256}


def pixel_config(action_types: Iterable[str], overrides: dict[str, Any] | None = None,
                 keys: Iterable[str] = ()) -> dict[str, Any]:
    """The config for tasks needing ``action_types`` whose hotkey head presses ``keys`` (the
    games' arrows, producers.suites.hotkeys): with a hotkey head and keys, those keys and
    ``ARROW_VISION``; ``overrides`` last."""
    action_types, keys = list(action_types), list(keys)
    pressing = {"keys": keys, **ARROW_VISION} if "hotkey" in action_types and keys else {}
    return {"action_types": action_types, **MINIWOB_VISION, **pressing, **(overrides or {})}
