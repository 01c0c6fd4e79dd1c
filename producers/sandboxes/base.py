"""The sandbox interface (browser, desktop) and its registry, keyed by name.

A sandbox runs one episode at a time. ``reset`` and ``step`` raise ``SandboxCrashed`` when the
browser or display itself failed (an infrastructure failure: the worker emits an ``aborted``
event with infra_failure=True and restarts the sandbox); an action that merely fails (a refused
SDK call, a click outside the page) is reported in ``StepResult.error`` and the episode goes on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Protocol

import numpy as np

from schemas.events import Observation, TaskSpec


class SandboxCrashed(RuntimeError):
    """The browser / display / process behind the sandbox died or hung."""


@dataclass
class Obs:
    observation: Observation  # screenshot already stored in the blob store
    image: np.ndarray  # the same screenshot, H x W x 3 uint8, for the in-process policy


@dataclass
class StepResult:
    obs: Obs
    reward: float
    done: bool
    success: bool = False
    error: str | None = None
    output: str | None = None  # what a GUI-SDK action returned (shell output, file contents)
    score: float | None = None  # a game's score after the step (its reward is the change); None: no score
    normalised_score: float | None = None  # that score on the game's scale (producers.games.registry)


class Sandbox(Protocol):
    kind: str

    async def start(self) -> None: ...
    async def reset(self, task: TaskSpec) -> Obs: ...
    async def step(self, action: Any) -> StepResult: ...
    async def close(self) -> None: ...


SANDBOX_REGISTRY: dict[str, Callable[..., Sandbox]] = {}


def register_sandbox(name: str):
    def deco(factory):
        SANDBOX_REGISTRY[name] = factory
        return factory
    return deco
