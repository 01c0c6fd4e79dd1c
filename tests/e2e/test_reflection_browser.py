"""`flywheel annotate` with a real Chromium on the real broker: episodes of an agent that follows
the scripted solver except for two wrong clicks run in a rollout-style sandbox (its pages warm
from an earlier episode), fail, go to flywheel.ct.v1; the annotator replays each in its own
browser with the screens verified byte for byte, finds tau at the first wrong click and emits the
error-correction and post-reflection pairs, whose screenshots are in the blob store."""

from __future__ import annotations

import asyncio
import threading

import pytest

from tests.e2e.browser_support import require_chromium

from infra.runtime.kafka_clients import DeliveryTracker, flush_or_raise, make_producer, read_to_end
from infra.runtime.policy import Decision
from infra.runtime.topics import TOPICS, topic_name
from producers import scripted
from producers.annotate import AnnotateConfig, Annotator
from producers.episode import run_episode
from producers.policy_client import PolicyClient, PolicyReply
from schemas.actions import Click
from schemas.blobs import BlobStore
from schemas.codec import decode, encode
from schemas.events import EpisodeEnded, PreferencePair, ScoredTrajectory, Step, TaskSpec, Trajectory

pytestmark = pytest.mark.e2e

BLANK = Click(x=0.97, y=0.98)  # the task area's bottom-right corner: no element there
# task, seed, the first wrong step, the step budget (too small once two steps are wasted)
CASES = [("login-user", 2, 1, 5), ("click-checkboxes", 4, 0, 2), ("enter-text", 1, 1, 3)]


class Flawed(PolicyClient):
    """The scripted solver, except a click on nothing at steps ``wrong`` and ``wrong + 1``."""

    needs_dom = True

    def __init__(self, wrong: int) -> None:
        super().__init__("pixel-flawed")
        self.wrong, self.version = wrong, 3

    async def act(self, request) -> PolicyReply:
        if request.step_index in (self.wrong, self.wrong + 1):
            action = BLANK
        else:
            action = scripted.solve(request.task.name, request.obs.observation.instruction, request.dom)
        return PolicyReply(Decision(action=action, logprob=-1.0, raw_output=action.model_dump_json()), self.version)


async def rollout(store: BlobStore) -> list[Trajectory]:
    """The episodes as a rollout worker runs them (deferred screenshot writes, a shared page)."""
    from producers.sandboxes.browser import BrowserSandbox
    from producers.sandboxes.browser_host import BrowserHost

    host = BrowserHost()
    sandbox = BrowserSandbox(store, host=host, defer_writes=True)
    await sandbox.start()
    out = []
    try:
        for name, seed, wrong, budget in CASES:
            warm = TaskSpec(task_id=f"warm-{name}", suite="miniwob", name=name, seed=seed + 100, max_steps=4)
            await run_episode(warm, sandbox, Flawed(99), lambda e: None, sandbox_name="browser", worker_id="w")
            task = TaskSpec(task_id=f"{name}-{seed}", suite="miniwob", name=name, seed=seed, max_steps=budget)
            events: list = []
            result = await run_episode(task, sandbox, Flawed(wrong), events.append, sandbox_name="browser", worker_id="w")
            assert result.status == "ended" and not result.success, result
            end = next(e for e in events if isinstance(e, EpisodeEnded))
            out.append(Trajectory(episode_id=result.episode_id, task=task, sandbox="browser", worker_id="w",
                                  policy="pixel-flawed", steps=[e for e in events if isinstance(e, Step)],
                                  status="ended", success=end.success, end_reason=end.reason, started_at=1.0,
                                  ended_at=2.0))
    finally:
        await sandbox.close()
        await host.close()
    return out


def test_annotate_replays_failed_browser_episodes_into_pairs(settings, group_id):
    require_chromium()
    store = BlobStore(settings.blob_root)
    trajectories = asyncio.run(rollout(store))
    producer, tracker = make_producer(settings), DeliveryTracker()
    for t in trajectories:
        scored = ScoredTrajectory(trajectory=t, scorer="env", scorer_version="1", reward=0.0, components={},
                                  verdict=0, rl_eligible=True, scored_at=2.0)
        producer.produce(topic_name(TOPICS.ct, settings), key=t.episode_id.encode(), value=encode(scored),
                         on_delivery=tracker)
    flush_or_raise(producer, tracker)

    cfg = AnnotateConfig(group_id=group_id, exit_when_idle_s=2.0, flush_interval_s=0.5)
    stats = Annotator(settings, cfg).run(threading.Event())
    assert stats.dead_letters == 0, "a replay diverged from its recording"
    assert stats.episodes == len(CASES) and dict(stats.outcomes) == {"pairs": len(CASES)}
    pairs = [decode(m.value(), PreferencePair) for m in read_to_end(settings, topic_name(TOPICS.pairs, settings), 30)]
    by = {(p.episode_id, p.kind): p for p in pairs}
    for t, (name, seed, wrong, _) in zip(trajectories, CASES):
        ec, pr = by[(t.episode_id, "error_correction")], by[(t.episode_id, "post_reflection")]
        assert ec.tau == pr.tau == wrong and ec.rejected.action == BLANK and pr.rejected.action == BLANK
        # chosen: what the solver did at that very state in the rollout's own recording of a clean run
        assert ec.chosen.action.type in ("click", "type") and ec.chosen.action != BLANK
        assert ec.observation == t.steps[wrong].observation and pr.observation == t.steps[wrong + 1].observation
        assert pr.history == t.steps[:wrong + 1] and pr.policy_version == 3
        store.get(pr.observation.screenshot.sha256)  # the screen the pair refers to is stored
