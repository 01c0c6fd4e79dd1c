"""Hot reload of policy versions from flywheel.policy.v1 while serving.

Delivery: every server replica must see every version of its policy, so each replica reads the
compacted topic from the beginning with its own throw-away consumer group and never commits.
On start it catches up to the end and loads only the newest version (falling back to the next
newest when that one is refused). After that, each newer version is loaded as it arrives.
Weights are checked against the announced sha256 before loading (``load_policy_version``); a
tampered or missing file is refused with a logged error and the current version keeps serving.
Loading happens on the reloader's thread; the swap is one attribute assignment, so a batch that
already took ``holder.policy`` finishes on the version it started with.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from infra.kafka import make_consumer
from infra.settings import Settings
from infra.topics import TOPICS, topic_name
from schemas.codec import DecodeError, decode
from schemas.events import PolicyVersion

log = logging.getLogger("flywheel.reload")


@dataclass
class PolicyHolder:
    """The version being served, plus what was refused (shown on /healthz)."""

    name: str
    policy: Any = None  # the loaded Policy (torch backend) or a handle (vLLM backend)
    version: int = -1
    kind: str = ""
    loaded_at: float = 0.0
    published: bool = False  # False while serving a fresh, never-published model (any version replaces it)
    refused: list[dict[str, Any]] = field(default_factory=list)

    def swap(self, policy: Any, pv: PolicyVersion | None) -> None:
        self.policy = policy
        self.version = pv.version if pv is not None else getattr(policy, "version", 0)
        self.kind = pv.kind if pv is not None else getattr(policy, "kind", "")
        self.loaded_at = time.time()
        self.published = pv is not None


def apply_version(holder: PolicyHolder, pv: PolicyVersion, load: Callable[[PolicyVersion], Any]) -> str:
    """Load ``pv`` into ``holder`` if it is newer; -> "loaded" | "stale" | "refused"."""
    if pv.policy != holder.name or (holder.published and pv.version <= holder.version):
        return "stale"
    try:
        policy = load(pv)
    except Exception as exc:  # tampered, missing or unloadable: keep serving what we have
        log.error("refusing %s v%d (still serving v%d): %s", pv.policy, pv.version, holder.version, exc)
        holder.refused.append({"version": pv.version, "sha256": pv.sha256, "error": str(exc)[:500], "ts": time.time()})
        del holder.refused[:-20]
        return "refused"
    holder.swap(policy, pv)
    log.info("now serving %s v%d (%s)", pv.policy, pv.version, pv.uri)
    return "loaded"


class PolicyReloader(threading.Thread):
    def __init__(self, settings: Settings, holder: PolicyHolder, load: Callable[[PolicyVersion], Any],
                 on_loaded: Callable[[PolicyVersion], None] | None = None) -> None:
        super().__init__(name="policy-reloader", daemon=True)
        self.settings, self.holder, self.load, self.on_loaded = settings, holder, load, on_loaded
        self.caught_up = threading.Event()
        self._stopping = threading.Event()
        self.error: str | None = None

    def stop(self) -> None:
        self._stopping.set()

    def _apply(self, pv: PolicyVersion) -> str:
        outcome = apply_version(self.holder, pv, self.load)
        if outcome == "loaded" and self.on_loaded is not None:
            self.on_loaded(pv)
        return outcome

    def run(self) -> None:
        topic = topic_name(TOPICS.policy, self.settings)
        try:
            consumer = make_consumer(self.settings, f"flywheel-serve-{uuid.uuid4().hex[:12]}")
        except Exception as exc:
            self.error = f"cannot create a consumer: {exc}"
            log.error("%s", self.error)
            return
        try:
            ends = self._assign_from_start(consumer, topic)
            backlog: dict[int, PolicyVersion] = {}
            while not self._stopping.is_set():
                msg = consumer.poll(0.5)
                if msg is not None and not msg.error():
                    pv = self._decode(msg)
                    if pv is not None and pv.policy == self.holder.name:
                        if self.caught_up.is_set():
                            self._apply(pv)
                        else:
                            backlog[pv.version] = pv
                    if msg.offset() + 1 >= ends.get(msg.partition(), 0):
                        ends.pop(msg.partition(), None)
                if not self.caught_up.is_set() and not ends:
                    self._catch_up(backlog)
        except Exception as exc:  # keep serving the current version; /healthz shows the reason
            self.error = f"{type(exc).__name__}: {exc}"
            log.exception("policy reloader stopped")
        finally:
            self.caught_up.set()
            consumer.close()

    def _assign_from_start(self, consumer, topic: str) -> dict[int, int]:
        meta = consumer.list_topics(topic, timeout=10)
        if topic not in meta.topics or meta.topics[topic].error is not None:
            raise RuntimeError(f"topic {topic} does not exist; run `flywheel topics`")
        parts = sorted(meta.topics[topic].partitions)
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in parts}
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
        return {p: end for p, end in ends.items() if end > 0}

    def _catch_up(self, backlog: dict[int, PolicyVersion]) -> None:
        """Load the newest published version; older ones only if the newer are refused."""
        for version in sorted(backlog, reverse=True):
            if self._apply(backlog[version]) != "refused":
                break
        self.caught_up.set()

    @staticmethod
    def _decode(msg) -> PolicyVersion | None:
        try:
            return decode(msg.value(), PolicyVersion)
        except DecodeError as exc:  # the sink routes bad records to the DLQ; a server only skips them
            log.warning("skipping undecodable policy record at offset %d: %s", msg.offset(), exc)
            return None
