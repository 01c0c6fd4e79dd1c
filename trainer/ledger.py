"""Which episodes a learner already trained on: exactly-once across replays, in bounded memory.

flywheel.rl.v1 can carry an episode more than once: Faust's at-least-once replays, a rebalance
that seeks back over records still in the pool, a re-scoring run routed to RL. The trainer
trains an episode at most once by remembering the ids it trained on.

The memory is bounded by staleness, exactly: a trajectory produced by version ``v`` is
trainable only while ``latest - v <= max_staleness``; a later copy of it is dropped as stale
anyway. So an id needs remembering only while its version is within the window, and
``prune`` forgets the rest. The ledger holds at most the episodes of ``max_staleness + 1``
versions, never the whole run; ``total`` still counts every episode ever trained.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from infra.versions import is_stale


@dataclass
class TrainedLedger:
    recent: dict[str, int] = field(default_factory=dict)  # episode id -> the version that produced it
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

    def to_dict(self) -> dict[str, Any]:
        return {"recent": dict(self.recent), "total": self.total}

    @classmethod
    def from_dict(cls, data: dict[str, Any] | list[str] | None) -> "TrainedLedger":
        if isinstance(data, list):  # a checkpoint from before the ledger: every id, versions unknown
            return cls(recent={str(e): 0 for e in data}, total=len(data))
        data = data or {}
        return cls(recent={str(k): int(v) for k, v in data.get("recent", {}).items()}, total=int(data.get("total", 0)))
