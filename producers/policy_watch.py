"""Hot reload: follow flywheel.policy.v1 (compacted, read from the beginning) and hand newer
versions of the configured policy to the PolicyClient between steps.

Delivery: infra.runtime.versions.VersionFollower, a plain assigned consumer with no commits (the topic is
compacted; every start reads it from the beginning). A version is adopted only if its weights blob exists and hashes to the
announced sha256; a bad announcement is logged, counted and dead-lettered, and the worker keeps
its current policy. Episodes never stop: the client swaps its weights between batches.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from infra.runtime.dlq import dead_letter, send_dead_letter
from infra.runtime.kafka_clients import DeliveryTracker
from infra.runtime.policy import weights_bytes
from infra.runtime.versions import Announcement, VersionFollower
from producers.policy_client import PolicyClient
from schemas.blobs import BlobStore
from schemas.events import PolicyVersion

log = logging.getLogger("flywheel.policy_watch")


def newer(pv: PolicyVersion, client: PolicyClient) -> bool:
    """A version to load: a later one, or any one while the client acts with weights of its own
    (its local init is labelled version 0 but is not the published version 0)."""
    return pv.policy == client.name and (pv.version > client.version
                                         or (not client.adopted and pv.version >= client.version))


class PolicyWatcher:
    def __init__(self, settings: Any, client: PolicyClient, blobs: BlobStore, producer: Any = None) -> None:
        self.settings, self.client, self.blobs, self.producer = settings, client, blobs, producer
        self.reloads = 0
        self.failures = 0
        self.latest_seen: int | None = None
        self._follower = VersionFollower(settings, "policy-watch")
        self._letters = DeliveryTracker()

    async def catch_up(self, timeout_s: float = 15.0) -> None:
        """Read the topic up to its end (the latest version per policy) before the first episode."""
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout_s
        while not self._follower.caught_up and loop.time() < end:
            ann = await asyncio.to_thread(self._follower.poll, 0.5)
            if ann is not None:
                await self._handle(ann)
        if not self._follower.caught_up:
            log.warning("policy topic not read to its end within %.0fs; carrying on", timeout_s)

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            ann = await asyncio.to_thread(self._follower.poll, 0.5)
            if ann is not None:
                await self._handle(ann)

    async def _handle(self, ann: Announcement) -> None:
        if ann.version is None:
            self._dead_letter(ann.msg, ann.error)
            return
        pv = ann.version
        if pv.policy != self.client.name:
            return
        self.latest_seen = max(self.latest_seen or 0, pv.version)
        if not newer(pv, self.client):
            return
        try:
            await asyncio.to_thread(weights_bytes, pv, self.blobs)  # exists and hashes to the announced sha256
            await self.client.load_version(pv, self.blobs)
        except Exception as exc:  # noqa: BLE001 - keep the current policy, say why loudly
            self.failures += 1
            log.error("not reloading %s v%d: %s", pv.policy, pv.version, exc)
            self._dead_letter(ann.msg, exc)
            return
        self.reloads += 1
        log.info("policy %s now at version %d (reload %d)", pv.policy, pv.version, self.reloads)

    def _dead_letter(self, msg: Any, exc: BaseException) -> None:
        if self.producer is None:
            return
        letter = dead_letter("rollout.policy_watch", exc, msg.topic(), msg.partition(), msg.offset(),
                             msg.key(), msg.value())
        # no offset to commit here (the topic is re-read from the start); a failed delivery is logged
        send_dead_letter(self.producer, self.settings, letter, msg.key(), on_delivery=self._letters)

    def close(self) -> None:
        self._follower.close()
