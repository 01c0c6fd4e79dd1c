"""What the PPO learner announces, and when. A new version's weights go to the blob store inside
the update, and the PolicyVersion describing them waits in the checkpoint's state
(``LearnerState.announce``); only once the checkpoint is written (the loop's ``committed``) is
it announced on flywheel.policy.v1 and cleared, then the update's metrics go to
flywheel.metrics.v1. A learner killed between its checkpoint and the announcement announces on
its next start. Delivery: the idempotent producer, flushed and acknowledged (trainer.core.publish).
"""

from __future__ import annotations

import logging
from typing import Any

from infra.runtime import versions
from infra.runtime.consume_loop import CheckpointFile
from infra.runtime.kafka_clients import DeliveryTracker
from infra.runtime.settings import Settings
from schemas.base import now
from schemas.blobs import BlobStore
from schemas.events import PolicyVersion, TrainerMetrics
from trainer.core.publish import make_version, publish_metrics, save_weights

log = logging.getLogger("flywheel.trainer")


class Publisher:
    """``stage``: a new version's weights stored, its announcement to keep; ``announce``: the
    checkpoint's pending version, published; ``metrics``: an update's metrics, published."""

    def __init__(self, settings: Settings, store: BlobStore, producer: Any, run_id: str, policy_name: str) -> None:
        self.settings, self.store, self.run_id, self.policy_name = settings, store, run_id, policy_name
        self.producer, self.tracker = producer, DeliveryTracker()

    def stage(self, policy, parent: int, metrics: dict[str, float]) -> dict[str, Any]:
        """Store ``policy``'s weights; -> its PolicyVersion (JSON) for the checkpoint to keep until announced."""
        return make_version(policy, save_weights(policy, self.store), parent=parent, metrics=metrics).model_dump(mode="json")

    def announce(self, ckpt: CheckpointFile) -> None:
        """Announce the version the checkpoint still has to, then record that it was."""
        state = ckpt.checkpoint.state
        if state.announce is None:
            return
        pv = PolicyVersion.model_validate(state.announce)
        versions.publish(self.producer, self.tracker, self.settings, pv)
        ckpt.checkpoint.state = state.model_copy(update={"announce": None})
        ckpt.save()
        if pv.parent is None:
            log.info("published random init %s v%d", pv.policy, pv.version)

    def metrics(self, update: int, version: int, metrics: dict[str, float]) -> None:
        publish_metrics(self.producer, self.tracker, self.settings, TrainerMetrics(
            run_id=self.run_id, update=update, policy=self.policy_name, policy_version=version,
            ts=now(), metrics={k: float(v) for k, v in metrics.items() if v == v}))
