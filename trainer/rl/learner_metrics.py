"""What the PPO learner measures about itself: each update's batch figures (published with the
version and on flywheel.metrics.v1), the update on the process's /metrics, and the share of
wall-clock it waited for data.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Iterator

import numpy as np

from infra.runtime.metrics import ProcessMetrics
from trainer.core import metric_names as M
from trainer.rl.update import EpisodeSample


def batch_metrics(batch: list[EpisodeSample], lags: list[int], counts: dict[str, int], trained_total: int,
                  idle_fraction: float) -> dict[str, float]:
    """The update's figures beside its losses: how stale and how long-winded its batch was, and the
    learner's running totals."""
    return {M.STALENESS_MEAN: float(np.mean(lags)), M.STALENESS_MAX: float(max(lags)),
            M.THOUGHT_LENGTH: float(np.mean([e.thought_chars for e in batch])),
            M.IDLE_FRACTION: idle_fraction,
            M.STALE_DROPPED_TOTAL: float(counts.get("stale_dropped", 0)),
            M.DEAD_LETTERED_TOTAL: float(counts.get("dead_lettered", 0)),
            M.DUPLICATES_SKIPPED_TOTAL: float(counts.get("duplicates_skipped", 0)),
            M.TRAINED_TOTAL: float(trained_total)}


def record_update(prom: ProcessMetrics, seconds: float, lags: list[int], version: int) -> None:
    """The update on /metrics: its time, what it trained and how stale each trajectory was."""
    prom["flywheel_trainer_updates_total"].inc()
    prom["flywheel_trainer_update_seconds"].observe(seconds)
    prom["flywheel_trainer_trajectories_total"].labels(fate="trained").inc(len(lags))
    for lag in lags:
        prom["flywheel_trainer_staleness"].observe(lag)
    prom["flywheel_trainer_policy_version"].set(version)


class BusyClock:
    """Wall-clock since start and the part of it spent decoding or training (``busy``)."""

    def __init__(self) -> None:
        self.started, self.busy_s = time.monotonic(), 0.0

    @contextmanager
    def busy(self) -> Iterator[None]:
        t0 = time.monotonic()
        try:
            yield
        finally:
            self.busy_s += time.monotonic() - t0

    def idle_fraction(self) -> float:
        """Share of wall-clock not spent decoding or training: waiting for data."""
        wall = time.monotonic() - self.started
        return max(0.0, 1.0 - self.busy_s / max(wall, 1e-9))
