"""The PolicyKind protocol names every fact and job step its callers read, so a new kind learns
what to give from the protocol alone (STYLE.md 13: nobody needs ``hasattr``); ``KindDefaults``
gives all of them but ``build``'s real body."""

from __future__ import annotations

import re
from pathlib import Path

from infra.runtime.policy import PolicyKind
from trainer.policies.base import KindDefaults

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("app", "trainer", "producers", "streams", "consumers", "infra")
READ = re.compile(r"policy_kind\([^()]*\)\.([A-Za-z_]\w*)")  # policy_kind(cfg.policy_kind).scores_actions


def protocol_members(proto: type) -> set[str]:
    names = {n for n in vars(proto) if not n.startswith("_")}
    return names | set(getattr(proto, "__annotations__", {}))


def read_by_callers() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            for name in READ.findall(path.read_text(encoding="utf-8")):
                found.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    return found


def test_every_kind_member_a_caller_reads_is_in_the_protocol():
    read = read_by_callers()
    assert "scores_actions" in read and "task_config" in read  # the scan sees the callers
    missing = {name: sorted(where) for name, where in read.items() if name not in protocol_members(PolicyKind)}
    assert not missing, f"read through policy_kind() but not named by PolicyKind: {missing}"


def test_the_kind_defaults_give_every_protocol_member():
    assert not [n for n in protocol_members(PolicyKind) if not hasattr(KindDefaults, n)]
