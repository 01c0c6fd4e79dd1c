"""The topic catalog: the only place a Flywheel topic name is spelled.

Code refers to topics by their catalog attribute (``TOPICS.steps``) and resolves the actual
name with ``topic_name(spec, settings)`` so a prefix (tests: a uuid) can be applied.
"""

from __future__ import annotations

from dataclasses import dataclass, field

DAY_MS = 24 * 3600 * 1000
MAX_MESSAGE_BYTES = 8 * 1024 * 1024  # trajectories carry many steps; screenshots travel as refs


@dataclass(frozen=True)
class TopicSpec:
    name: str
    key: str
    value: str
    partitions: int
    cleanup: str = "delete"
    retention_ms: int = 7 * DAY_MS
    max_message_bytes: int = MAX_MESSAGE_BYTES
    extra: dict[str, str] = field(default_factory=dict)

    def config(self, min_insync_replicas: int = 1) -> dict[str, str]:
        cfg = {
            "cleanup.policy": self.cleanup,
            "max.message.bytes": str(self.max_message_bytes),
            "min.insync.replicas": str(min_insync_replicas),
        }
        if self.cleanup == "delete":
            cfg["retention.ms"] = str(self.retention_ms)
        cfg.update(self.extra)
        return cfg


STEP_PARTITIONS = 4  # trajectories must match: an episode stays on one partition number end to end


@dataclass(frozen=True)
class Catalog:
    tasks: TopicSpec = TopicSpec("flywheel.tasks.v1", "task_id", "TaskSpec", 4)
    steps: TopicSpec = TopicSpec("flywheel.steps.v1", "episode_id", "EpisodeEvent", STEP_PARTITIONS)
    trajectories: TopicSpec = TopicSpec("flywheel.trajectories.v1", "episode_id", "Trajectory", STEP_PARTITIONS)
    scored: TopicSpec = TopicSpec("flywheel.scored.v1", "episode_id", "ScoredTrajectory", STEP_PARTITIONS)
    sft: TopicSpec = TopicSpec("flywheel.sft.v1", "episode_id", "ScoredTrajectory", STEP_PARTITIONS, retention_ms=90 * DAY_MS)
    ct: TopicSpec = TopicSpec("flywheel.ct.v1", "episode_id", "ScoredTrajectory", STEP_PARTITIONS, retention_ms=90 * DAY_MS)
    rl: TopicSpec = TopicSpec("flywheel.rl.v1", "episode_id", "ScoredTrajectory", STEP_PARTITIONS)
    policy: TopicSpec = TopicSpec(
        "flywheel.policy.v1", "policy", "PolicyVersion", 1, cleanup="compact",
        extra={"min.cleanable.dirty.ratio": "0.1", "segment.ms": str(3600 * 1000)},
    )
    metrics: TopicSpec = TopicSpec("flywheel.metrics.v1", "run_id", "TrainerMetrics", 1)
    # reflection tuning (UI-TARS section 4.5): annotated pairs kept long, like the sft/ct data sets
    pairs: TopicSpec = TopicSpec("flywheel.pairs.v1", "episode_id", "PreferencePair", STEP_PARTITIONS,
                                 retention_ms=90 * DAY_MS)
    dlq: TopicSpec = TopicSpec("flywheel.dlq.v1", "original key", "DeadLetter", 1, retention_ms=30 * DAY_MS)

    def all(self) -> list[TopicSpec]:
        return [getattr(self, f) for f in self.__dataclass_fields__]


TOPICS = Catalog()


def topic_name(spec: TopicSpec, settings=None, prefix: str | None = None) -> str:
    """The broker-side name of a catalog topic, with the settings' prefix applied."""
    p = prefix if prefix is not None else (getattr(settings, "topic_prefix", "") if settings else "")
    return f"{p}{spec.name}"
