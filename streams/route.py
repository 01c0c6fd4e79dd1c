"""Flywheel routing of scored trajectories (pure functions) and the routing-rule registry.

A rule maps a ScoredTrajectory, the latest known version of each policy, and ``max_staleness``
to the records to produce: (topic spec, record) pairs plus the reasons. The routed record is
the scored one with ``routes``, ``route_reasons`` and the final ``rl_eligible`` filled in; it
keeps the scored record's deterministic ``event_id`` on every topic, so consumers dedupe.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from infra.runtime import versions
from infra.runtime.errors import UserError
from infra.runtime.topics import TOPICS, TopicSpec
from schemas.events import ScoredTrajectory

ROUTE_TOPICS: dict[str, TopicSpec] = {"sft": TOPICS.sft, "ct": TOPICS.ct, "rl": TOPICS.rl}


@dataclass(frozen=True)
class Routing:
    records: list[tuple[TopicSpec, ScoredTrajectory]]
    reasons: list[str]


def staleness(scored: ScoredTrajectory, latest: Mapping[str, int]) -> int:
    """How many versions the oldest step's policy is behind the latest known one (0 if unknown)."""
    traj = scored.trajectory
    oldest, _ = traj.policy_versions
    return versions.staleness(latest.get(traj.policy, oldest), oldest)


def _finish(scored: ScoredTrajectory, routes: list[str], reasons: list[str], rl: bool) -> Routing:
    record = scored.model_copy(update={"routes": routes, "route_reasons": reasons, "rl_eligible": rl})
    return Routing([(ROUTE_TOPICS[r], record) for r in routes], reasons)


def _rl_decision(scored: ScoredTrajectory, latest: Mapping[str, int], max_staleness: int) -> tuple[bool, str]:
    if scored.trajectory.unsampled_steps:  # whatever the scorer said: PPO's data must be sampled
        return False, "rl: not sampled (greedy or scripted actions)"
    if not scored.rl_eligible:
        return False, "rl: not eligible (infrastructure abort, no steps or missing steps)"
    lag = staleness(scored, latest)
    if lag > max_staleness:
        return False, f"rl: policy {lag} versions stale (max {max_staleness})"
    return True, f"rl: eligible, staleness {lag}"


RoutingRule = Callable[[ScoredTrajectory, Mapping[str, int], int], Routing]
RULES: dict[str, RoutingRule] = {}


def register_rule(name: str):
    def deco(fn: RoutingRule) -> RoutingRule:
        RULES[name] = fn
        return fn
    return deco


@register_rule("flywheel-v1")
def flywheel_v1(scored: ScoredTrajectory, latest: Mapping[str, int], max_staleness: int) -> Routing:
    """V(s)=1 -> sft, V(s)=0 -> ct (if it has steps), RL-eligible and fresh -> rl."""
    routes, reasons = [], []
    if scored.verdict == 1:
        routes.append("sft")
        reasons.append("sft: V(s)=1")
    elif scored.trajectory.steps:
        routes.append("ct")
        reasons.append("ct: V(s)=0")
    else:
        reasons.append("ct: skipped, no steps")
    rl, why = _rl_decision(scored, latest, max_staleness)
    reasons.append(why)
    if rl:
        routes.append("rl")
    return _finish(scored, routes, reasons, rl)


@register_rule("rl-clean-v1")
def rl_clean_v1(scored: ScoredTrajectory, latest: Mapping[str, int], max_staleness: int) -> Routing:
    """Like flywheel-v1, but trajectories the anomaly filter flagged stay out of RL."""
    base = flywheel_v1(scored, latest, max_staleness)
    rl_routed = any(spec is TOPICS.rl for spec, _ in base.records)
    if not scored.anomalies or not rl_routed:
        return base
    routes = [r for r in base.records[0][1].routes if r != "rl"]
    reasons = [r for r in base.reasons if not r.startswith("rl:")]
    reasons.append(f"rl: {len(scored.anomalies)} anomalies")
    return _finish(scored, routes, reasons, False)


def get_rule(name: str) -> RoutingRule:
    if name not in RULES:
        raise UserError(f"unknown routing rule {name!r}: choose one of {', '.join(sorted(RULES))}")
    return RULES[name]


def route(scored: ScoredTrajectory, latest: Mapping[str, int], max_staleness: int,
          rule: str = "flywheel-v1") -> Routing:
    return get_rule(rule)(scored, latest, max_staleness)
