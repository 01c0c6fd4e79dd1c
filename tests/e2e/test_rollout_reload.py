"""Hot reload of the in-process torch policy from flywheel.policy.v1, and SIGTERM of `flywheel rollout`."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import orjson
import pytest

from tests.e2e.browser_support import require_chromium
from tests.e2e.rollout_support import start_random_rollout, stop_with_sigterm, wait_for_episodes
from tests.e2e.test_rollout_worker import config, episodes_of, read_topic

from infra.runtime.kafka_clients import DeliveryTracker, flush_or_raise, make_producer
from infra.runtime.topics import TOPICS, topic_name
from producers.policy_client import TorchClient
from producers.rollout import RolloutWorker
from producers.tasks import build_tasks, submit
from schemas.blobs import BlobStore
from schemas.codec import encode
from schemas.events import PolicyVersion

pytestmark = pytest.mark.e2e
NAME = "pixel-reload-test"
WAIT_ONLY = {"action_types": ["wait"], "grid": 4, "channels": [4, 4, 4], "embed_buckets": 64, "embed_dim": 4}


@pytest.fixture(autouse=True)
def _chromium():
    require_chromium()


def publish(settings, version: int, seed: int, tamper: bool = False) -> PolicyVersion:
    """Store weights of a fresh policy in the blob store and announce them on the policy topic."""
    from safetensors.torch import save

    from infra.runtime.policy import build_policy

    policy = build_policy("pixel", NAME, {**WAIT_ONLY, "seed": seed})
    data = save({k: v.contiguous() for k, v in policy.state_dict().items()})
    blobs = BlobStore(settings.blob_root)
    ref = blobs.put(data, "application/x-safetensors")
    if tamper:  # the stored file no longer matches the sha256 the event announces
        Path(ref.uri.removeprefix("file://")).write_bytes(data[:-1] + b"\x00")
    pv = PolicyVersion(policy=NAME, version=version, kind="pixel", uri=ref.uri, sha256=ref.sha256,
                       parent=version - 1 or None, created_at=time.time(), config=policy.config_dict())
    producer, tracker = make_producer(settings), DeliveryTracker()
    producer.produce(topic_name(TOPICS.policy, settings), key=NAME.encode(), value=encode(pv), on_delivery=tracker)
    flush_or_raise(producer, tracker)
    return pv


class PublishMidEpisode(TorchClient):
    """At step 2 of the first episode, publishes v2 (and a tampered v3) and waits for the reload."""

    def __init__(self, settings) -> None:
        super().__init__(NAME, kind="pixel", config=WAIT_ONLY)
        self.settings, self.published = settings, False

    async def act(self, request):
        if not self.published and request.step_index == 2:
            self.published = True
            await asyncio.to_thread(publish, self.settings, 2, 2)
            end = time.time() + 20
            while self.version < 2 and time.time() < end:
                await asyncio.sleep(0.05)
            await asyncio.to_thread(publish, self.settings, 3, 3, True)
        return await super().act(request)


def test_newer_version_is_hot_reloaded_between_steps_and_a_tampered_one_refused(settings, group_id):
    publish(settings, 1, 1)  # read at start-up (the topic is compacted and read from the beginning)
    submit(settings, build_tasks("miniwob", ["click-test"], 2, prefix="reload", max_steps=6))
    client = PublishMidEpisode(settings)
    worker = RolloutWorker(config(group_id, sandboxes=1, reload=True, policy_backend="torch", policy_name=NAME,
                                  idle_exit_s=4.0), settings, client, "w-reload")
    assert asyncio.run(worker.run()) == 0
    episodes = episodes_of(read_topic(settings, TOPICS.steps, 2 * 8))
    versions = sorted([s.policy_version for s in events[1:-1]] for events in episodes.values())
    # the first episode straddles the swap: it never stopped, later steps carry v2
    assert [1, 1, 2, 2, 2, 2] in versions and [2] * 6 in versions
    for events in episodes.values():
        assert events[0].policy_version in (1, 2) and events[-1].reason == "step_budget"
        assert all(s.logprob <= 0.0 and s.value is not None for s in events[1:-1])
    assert worker.watcher.reloads == 2 and worker.watcher.failures == 1 and client.version == 2
    status = orjson.loads((settings.data_path / "rollout" / "w-reload.json").read_bytes())
    assert status["reloads"] == 2 and status["policy_version"] == 2


def test_flywheel_rollout_stops_cleanly_on_sigterm(settings, group_id, tmp_path):
    submit(settings, build_tasks("miniwob", ["click-test"], 50, prefix="term", max_steps=5))
    proc, status_file = start_random_rollout(settings, group_id, "w-term", 2)
    try:
        wait_for_episodes(status_file, 2, 60)
    finally:
        out = stop_with_sigterm(proc)
    assert proc.returncode == 0, out[-3000:]
    status = orjson.loads(status_file.read_bytes())
    assert status["final"] and status["in_flight"] == 0 and 2 <= status["episodes"] < 50
    episodes = episodes_of(read_topic(settings, TOPICS.steps, 2 * status["episodes"], timeout=20))
    assert len(episodes) == status["episodes"]
    for events in episodes.values():  # every started episode got its terminal event
        assert events[-1].kind in ("ended", "aborted")
