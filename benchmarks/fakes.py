"""The test fakes (tests/fakes: valid fake events and a tiny offline click task) for the benchmarks
that need them, re-exported in one place. They are test support, not part of the installed
package: these benchmarks run from the checkout's root (``python -m benchmarks.<name>`` puts the
working folder on sys.path), where ``tests.fakes`` is found."""

from __future__ import annotations

from tests.fakes.clicks import learn, make_episode, scored_trajectory
from tests.fakes.run import publish, synthetic_run
from tests.fakes.steps import episode_events

__all__ = ["episode_events", "learn", "make_episode", "publish", "scored_trajectory", "synthetic_run"]
