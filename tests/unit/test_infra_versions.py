"""The one definition of staleness, and the latest version per policy."""

from __future__ import annotations

from infra.runtime import versions
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


def test_dead_letters_without_a_source_offset_keep_distinct_ids():
    from schemas.events import DeadLetter

    def letter(key: str) -> DeadLetter:
        return DeadLetter(stage="assembler", error_type="ValueError", message="abandoned", source_topic="steps",
                          source_partition=0, source_offset=-1, original_key=key, original_value="", ts=1.0)

    assert letter("YQ==").event_id != letter("Yg==").event_id  # two abandoned episodes, two rows
    with_offset = letter("YQ==").model_copy(update={"source_offset": 7})
    assert with_offset.event_id == "steps:0:7:assembler"
