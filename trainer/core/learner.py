"""What every learner checkpoints, in the one format of ``infra.runtime.checkpoint``.

A learner runs as a stage of the checkpointed consume loop (``infra.runtime.consume_loop``) with a
``CheckpointFile``: one JSON file holds the next offset of every (topic, partition), the
learner's typed state (``LearnerState``) and the ids it trained on. The weights and optimiser of
a state are too big for that file: the learner's ``flush`` writes them first under a name of
their own (``weights-<update>.pt``, fsynced) and the state names that file, so the switch from
one consistent snapshot to the next is the atomic rename of the JSON file. Older weight files
are removed only after that switch.

A new version is announced after the commit (the loop's ``committed`` hook): the state keeps the
``PolicyVersion`` to announce until then, so a learner killed between checkpoint and announcement
announces it when it starts again.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator

from infra.runtime.settings import Settings


class LearnerState(BaseModel):
    """The typed state of a learner's checkpoint (``infra.runtime.checkpoint.Checkpoint[LearnerState]``).

    A learner with facts of its own declares them as fields of a subclass (``trainer.rl.state.PPOState``)."""

    model_config = ConfigDict(extra="forbid")

    version: int = Field(description="policy version the weights file holds")
    config: dict[str, Any] = Field(description="the policy's config (build_policy rebuilds it from this)")
    weights_file: str = Field(description="name, in the checkpoint's folder, of the weights + optimiser file")
    updates: int = Field(0, description="updates made since the learner first started")
    announce: dict[str, Any] | None = Field(None, description="PolicyVersion (JSON) still to announce; None once announced")
    counts: dict[str, int] = Field(default_factory=dict, description="running totals (stale dropped, dead letters ...)")

    @model_validator(mode="before")
    @classmethod
    def _lift_extra(cls, data: Any) -> Any:
        """Checkpoints written before a learner's own facts were typed kept them in an untyped
        ``extra`` dict: they are read as the fields they are now (a field of the state wins)."""
        if isinstance(data, dict) and isinstance(data.get("extra"), dict):
            data = {**data["extra"], **{k: v for k, v in data.items() if k != "extra"}}
        return data


def checkpoint_file(settings: Settings, folder_name: str) -> Path:
    return settings.checkpoint_root / folder_name / "checkpoint.json"


def save_torch_atomic(obj: Any, path: Path) -> None:
    """``torch.save`` into a temporary file beside ``path``, fsynced, then renamed over it: a process
    killed while writing leaves the old file or none, never a half-written one."""
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    with open(tmp, "wb") as fh:
        torch.save(obj, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def write_weights(folder: Path, update: int, policy, optimizer: torch.optim.Optimizer) -> str:
    """Weights + optimiser of update ``update`` into their own file, fsynced; -> its name."""
    folder.mkdir(parents=True, exist_ok=True)
    name = f"weights-{update}.pt"
    save_torch_atomic({"weights": policy.state_dict(), "optimizer": optimizer.state_dict()}, folder / name)
    return name


def read_weights(folder: Path, state: LearnerState) -> dict[str, Any]:
    """{"weights", "optimizer"} of the state's weights file, on the CPU (a trainer that wrote it on
    a GPU may resume on a machine without one; the caller moves the policy to its device)."""
    return torch.load(folder / state.weights_file, weights_only=False, map_location="cpu")


def drop_other_weights(folder: Path, keep: str) -> None:
    """Remove weight files the checkpoint no longer names (and temporaries a crash left)."""
    for path in folder.glob("weights-*.pt*"):
        if path.name != keep:
            path.unlink(missing_ok=True)
