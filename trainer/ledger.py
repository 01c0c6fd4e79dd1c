"""The PPO trainer's memory of trained episodes: ``infra.checkpoint.TrainedIds`` (exactly-once
across replays, bounded by the staleness window) in the dict form its torch checkpoint stores.

flywheel.rl.v1 can carry an episode more than once (Faust's at-least-once replays, a rebalance
that seeks back, a re-scoring run routed to RL); the trainer skips ids it holds here.
"""

from __future__ import annotations

from typing import Any

from infra.checkpoint import TrainedIds


class TrainedLedger(TrainedIds):
    def to_dict(self) -> dict[str, Any]:
        return {"recent": dict(self.recent), "total": self.total}

    @classmethod
    def from_dict(cls, data: dict[str, Any] | list[str] | None) -> "TrainedLedger":
        if isinstance(data, list):  # a checkpoint from before the ledger: every id, versions unknown
            return cls(recent={str(e): 0 for e in data}, total=len(data))
        data = data or {}
        return cls(recent={str(k): int(v) for k, v in data.get("recent", {}).items()}, total=int(data.get("total", 0)))
