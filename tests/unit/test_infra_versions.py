"""The one definition of staleness, and the latest version per policy."""

from __future__ import annotations

from infra import versions
from schemas.events import PolicyVersion


def pv(policy: str, version: int) -> PolicyVersion:
    return PolicyVersion(policy=policy, version=version, kind="pixel", uri=f"blob://{version}", sha256="0" * 64,
                         parent=None, created_at=1.0, metrics={}, config={})


def test_staleness_counts_versions_behind_and_never_goes_negative():
    assert versions.staleness(latest=7, produced=4) == 3
    assert versions.staleness(latest=4, produced=7) == 0  # a newer producer than we know of is not stale


def test_is_stale_only_beyond_the_bound():
    assert not versions.is_stale(latest=6, produced=4, max_staleness=2)
    assert versions.is_stale(latest=7, produced=4, max_staleness=2)
    assert versions.is_stale(latest=5, produced=4, max_staleness=0)


def test_latest_by_policy_takes_the_newest_of_each_policy_in_any_order():
    found = [pv("a", 3), pv("b", 1), pv("a", 5), pv("a", 4)]
    assert versions.latest_by_policy(found) == {"a": 5, "b": 1}
