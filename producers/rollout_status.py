"""Rollout counters, a progress log line and a JSON status file the demo and operators read.

The file is ``<data_dir>/rollout/<worker_id>.json``, rewritten atomically (temp file + rename)
every ``interval_s`` seconds and once more at exit with ``"final": true``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import orjson

log = logging.getLogger("flywheel.rollout")


@dataclass
class Counters:
    policy: str = ""
    policy_version: int = 0
    episodes: int = 0
    ended: int = 0
    aborted: int = 0
    infra_failures: int = 0
    successes: int = 0
    reward_sum: float = 0.0
    steps: int = 0
    reloads: int = 0
    dead_letters: int = 0
    sandbox_restarts: int = 0
    in_flight: int = 0
    sync_wait_s: float = 0.0  # sync mode: time spent waiting for the next policy version
    started_at: float = field(default_factory=time.time)

    def snapshot(self) -> dict[str, Any]:
        elapsed = max(time.time() - self.started_at, 1e-9)
        out = asdict(self)
        out.update(
            success_rate=self.successes / self.ended if self.ended else 0.0,
            mean_reward=self.reward_sum / self.ended if self.ended else 0.0,
            episodes_per_s=self.episodes / elapsed,
            steps_per_s=self.steps / elapsed,
            elapsed_s=elapsed,
        )
        return out


def status_path(settings: Any, worker_id: str) -> Path:
    return Path(settings.data_dir) / "rollout" / f"{worker_id}.json"


class StatusWriter:
    def __init__(self, settings: Any, worker_id: str, counters: Counters, interval_s: float,
                 refresh: Callable[[], None] | None = None) -> None:
        self.path = status_path(settings, worker_id)
        self.worker_id, self.counters, self.interval_s = worker_id, counters, interval_s
        self.refresh = refresh  # pulls live values (policy version, reloads) into the counters
        self._last = (time.time(), 0, 0)  # (when, steps, episodes) at the previous write

    def write(self, final: bool = False) -> dict[str, Any]:
        if self.refresh is not None:
            self.refresh()
        now = time.time()
        snap = {"worker_id": self.worker_id, "updated_at": now, "final": final, **self.counters.snapshot()}
        then, steps, episodes = self._last
        dt = max(now - then, 1e-9)
        snap["recent_steps_per_s"] = (self.counters.steps - steps) / dt
        snap["recent_episodes_per_s"] = (self.counters.episodes - episodes) / dt
        self._last = (now, self.counters.steps, self.counters.episodes)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        tmp.write_bytes(orjson.dumps(snap))
        os.replace(tmp, self.path)
        return snap

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), self.interval_s)
            except asyncio.TimeoutError:
                pass
            s = self.write()
            log.info("rollout %s: %d episodes (%.2f/s now), %d steps (%.1f/s now), success %.0f%%, %d aborted, "
                     "policy %s v%d, %d reloads, %d in flight", self.worker_id, s["episodes"], s["recent_episodes_per_s"],
                     s["steps"], s["recent_steps_per_s"], 100 * s["success_rate"], s["aborted"], s["policy"],
                     s["policy_version"], s["reloads"], s["in_flight"])
