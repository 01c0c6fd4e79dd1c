"""The test fakes (tests/fakes: valid fake events and a tiny offline click task) for the benchmark
scripts. They are test support, not part of the installed package, so this puts the checkout's
root on sys.path and re-exports what the benchmarks use."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = str(Path(__file__).resolve().parents[1])
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from tests.fakes.clicks import learn, make_episode, scored_trajectory  # noqa: E402
from tests.fakes.run import publish, synthetic_run  # noqa: E402
from tests.fakes.steps import episode_events  # noqa: E402

__all__ = ["episode_events", "learn", "make_episode", "publish", "scored_trajectory", "synthetic_run"]
