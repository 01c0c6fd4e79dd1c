"""The one checkpoint file of a learner: offsets by (topic, partition), a typed state, trained ids.

A learner (PPO, SFT, CT, DPO) does not trust the consumer group's offsets: they say nothing about
the weights it holds. Its checkpoint file is the single point of no return; it records together

- ``offsets``: the next offset to read, keyed by topic, then partition (a learner may read more
  than one topic, and the same partition number of two topics is two positions);
- ``state``: the learner's own typed state (a pydantic model it declares: policy version, the
  uri of the weights it wrote for that version, counters ...). Large artifacts (weights,
  optimiser) are written by the learner's flush under names of their own (content-addressed or
  versioned) and the state refers to them, so the checkpoint file alone switches atomically from
  one consistent snapshot to the next;
- ``trained``: the ids already trained on (``TrainedIds``), bounded by the staleness window.

``save`` writes a temporary file, fsyncs it, renames it over the old one and fsyncs the folder:
a crash leaves either the old checkpoint or the new one, never a mix.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Generic, TypeVar

import orjson
from pydantic import BaseModel, ConfigDict, Field

from infra.runtime.versions import is_stale

S = TypeVar("S", bound=BaseModel)


class TrainedIds(BaseModel):
    """Which episodes a learner trained on, remembered only while a copy could still be trained.

    A trajectory produced by version ``v`` is trainable only while ``latest - v <= max_staleness``;
    a later copy of it is dropped as stale anyway, so ``prune`` forgets ids outside the window.
    The memory holds at most the episodes of ``max_staleness + 1`` versions; ``total`` counts all.
    """

    model_config = ConfigDict(extra="forbid")

    recent: dict[str, int] = Field(default_factory=dict, description="episode id -> version that produced it")
    total: int = 0

    def __contains__(self, episode_id: str) -> bool:
        return episode_id in self.recent

    def add(self, episode_id: str, produced_by: int) -> None:
        if episode_id in self.recent:
            raise ValueError(f"episode {episode_id} trained twice")  # the caller's check failed: never silent
        self.recent[episode_id] = produced_by
        self.total += 1

    def prune(self, latest: int, max_staleness: int) -> int:
        """Forget ids no copy of which could still be trained; -> how many were forgotten."""
        old = [e for e, v in self.recent.items() if is_stale(latest, v, max_staleness)]
        for e in old:
            del self.recent[e]
        return len(old)


class Checkpoint(BaseModel, Generic[S]):
    """What a learner's checkpoint file holds (JSON)."""

    model_config = ConfigDict(extra="forbid")

    format: int = 1
    offsets: dict[str, dict[int, int]] = Field(default_factory=dict, description="topic -> partition -> next offset")
    state: S | None = None
    trained: TrainedIds = Field(default_factory=TrainedIds)

    def next_offset(self, topic: str, partition: int) -> int | None:
        return self.offsets.get(topic, {}).get(partition)

    def advance(self, positions: dict[tuple[str, int], int]) -> None:
        for (topic, partition), offset in positions.items():
            self.offsets.setdefault(topic, {})[partition] = offset


def save_checkpoint(path: Path, ckpt: Checkpoint) -> None:
    """Atomic and durable: temporary file, fsync, rename, fsync of the folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    with open(tmp, "wb") as fh:
        fh.write(orjson.dumps(ckpt.model_dump(mode="json"), option=orjson.OPT_NON_STR_KEYS))
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def load_checkpoint(path: Path, state_type: type[S]) -> Checkpoint[S]:
    """The checkpoint at ``path``, or an empty one (no offsets, no state) when there is none."""
    if not path.exists():
        return Checkpoint[state_type]()  # type: ignore[valid-type]
    data: Any = orjson.loads(path.read_bytes())
    return Checkpoint[state_type].model_validate(data)  # type: ignore[valid-type]
