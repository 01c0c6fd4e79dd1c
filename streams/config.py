"""Typed configs of the stream processors (`flywheel streams`, `flywheel rescore`)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from infra.runtime.config import opt
from infra.runtime.settings import Settings


@dataclass
class StreamsConfig:
    scorer: str = opt("rule-v1", "reward scorer, by registered name (streams.score.SCORERS)")
    routing_rule: str = opt("flywheel-v1", "routing rule, by registered name (streams.route.RULES)")
    abandoned_timeout_s: float = opt(300.0, "an episode with no event for this long is closed as aborted (abandoned)")
    abandoned_scan_s: float = opt(10.0, "how often the abandoned-episode timer scans the assembler table")
    tombstone_retention_s: float = opt(3600.0, "how long an emitted episode is remembered to drop late duplicates")
    judge_url: str = opt("", "HTTP outcome reward model / judge; empty: off")
    judge_timeout_s: float = opt(10.0, "judge request timeout")
    judge_tasks: str = opt("", "comma-separated task names whose outcome the judge decides instead of the page's verdict ('*': every task); empty: the judge, if set, only adds its score")
    judge_success_at: float = opt(0.5, "a task the judge decides is a success (V(s) = 1, SFT) from this judge score on (`flywheel verifier train` prints its threshold)")
    app_id: str = opt("", "Faust app id (consumer group, changelog prefix); empty: derived from the topic prefix")
    commit_interval_s: float = opt(1.0, "how often Faust commits consumed offsets (after flushing the producer)")
    commit_every: int = opt(10_000, "Faust also commits after this many events (broker_commit_every)")
    event_loop: str = opt("uvloop", "the worker's asyncio event loop (Faust's loop option)", choices=("uvloop", "aio"))
    standby_replicas: int = opt(1, "standby copies of the assembler table on other workers")
    session_timeout_s: float = opt(30.0, "Kafka group session timeout: how soon a dead worker's partitions move")
    producer_linger_ms: float = opt(5.0, "producer linger: batch sends for this long (fewer requests under load)")
    producer_batch_bytes: int = opt(1 << 20, "producer batch size per partition (a trajectory is ~10 KiB)")
    stream_buffer_maxsize: int = opt(4096, "events buffered per partition before the consumer pauses")
    batch_max: int = opt(512, "events an agent takes at once (their outputs are acknowledged together)")
    batch_within_s: float = opt(0.02, "how long an agent waits to fill a batch (adds at most this latency per stage)")
    loglevel: str = opt("info", "Faust worker log level", choices=("debug", "info", "warning", "error"))


@dataclass
class RescoreConfig:
    scorer: str = opt("strict-v1", "scorer to replay flywheel.trajectories.v1 through")
    routing_rule: str = opt("flywheel-v1", "routing rule for the re-scored records")
    since: str = opt("", "replay from this time: ISO 8601, unix seconds, or a duration ago like 2h / 30m; empty: all")
    until_caught_up: bool = opt(True, "stop once the end offsets seen at start are reached")
    route: bool = opt(True, "also route the re-scored records to flywheel.sft.v1 / flywheel.ct.v1")
    to_rl: bool = opt(False, "also route them to flywheel.rl.v1 (off: the trainer would train on re-scored copies)")
    judge_url: str = opt("", "HTTP outcome reward model / judge; empty: off")
    judge_timeout_s: float = opt(10.0, "judge request timeout")
    judge_tasks: str = opt("", "comma-separated task names whose outcome the judge decides instead of the page's verdict ('*': every task); empty: the judge, if set, only adds its score")
    judge_success_at: float = opt(0.5, "a task the judge decides is a success (V(s) = 1, SFT) from this judge score on (`flywheel verifier train` prints its threshold)")
    group_id: str = opt("", "consumer group; empty: flywheel-rescore-<scorer>")


def app_id_for(settings: Settings, cfg: StreamsConfig) -> str:
    """The Faust app id: explicit, or derived from the topic prefix so test runs never share state."""
    if cfg.app_id:
        return cfg.app_id
    prefix = re.sub(r"[^A-Za-z0-9._-]", "-", settings.topic_prefix)
    return f"{prefix}flywheel-streams"
