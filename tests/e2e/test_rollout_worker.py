"""The rollout worker end to end: real broker, real Chromium, scripted / random / torch policies."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections import defaultdict

import pytest

from tests.e2e.browser_support import require_chromium

from infra.runtime.kafka_clients import DeliveryTracker, flush_or_raise, make_consumer, make_producer
from infra.runtime.topics import TOPICS, topic_name
from producers.policy_client import PolicyClient, PolicyReply, make_client
from producers.rollout import RolloutConfig, RolloutWorker
from producers.tasks import build_tasks, submit
from schemas.actions import Click
from schemas.codec import decode, encode
from schemas.events import DeadLetter, EpisodeEvent, TaskSpec
from infra.runtime.policy import Decision

pytestmark = pytest.mark.e2e


@pytest.fixture(autouse=True)
def _chromium():
    require_chromium()


def config(group_id: str, **kw) -> RolloutConfig:
    base = dict(sandboxes=2, policy_backend="scripted", group_id=group_id, idle_exit_s=3.0, reload=False,
                status_interval_s=0.5, shutdown_grace_s=5.0)
    base.update(kw)
    return RolloutConfig(**base)


def read_topic(settings, spec, count: int, timeout: float = 30.0) -> list:
    consumer = make_consumer(settings, f"reader-{time.time_ns()}")
    consumer.subscribe([topic_name(spec, settings)])
    out, end = [], time.time() + timeout
    try:
        while len(out) < count and time.time() < end:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                out.append(msg)
        # anything beyond the expected count is a bug (duplicates): give it a moment to show up
        extra_end = time.time() + 1.0
        while time.time() < extra_end:
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                out.append(msg)
    finally:
        consumer.close()
    return out


def episodes_of(msgs) -> dict[str, list]:
    """Events by run, ``<task_id>:<attempt>``: each execution has its own episode id
    (``<task_id>:<attempt>:<execution>``), and one run of a task is one execution here."""
    by_episode: dict[str, list] = defaultdict(list)
    for m in msgs:
        event = decode(m.value(), EpisodeEvent)
        assert m.key().decode() == event.episode_id
        by_episode[event.episode_id].append(event)
    by_run = {eid.rsplit(":", 1)[0]: events for eid, events in by_episode.items()}
    assert len(by_run) == len(by_episode), "two executions of one task attempt"
    return by_run


def assert_well_formed(events) -> None:
    kinds = [e.kind for e in events]
    assert kinds[0] == "started" and kinds[-1] in ("ended", "aborted")
    assert kinds[1:-1] == ["step"] * (len(kinds) - 2)
    steps = events[1:-1]
    assert [s.step_index for s in steps] == list(range(len(steps)))
    assert events[-1].num_steps == len(steps)
    for s in steps:
        assert s.next_screenshot_sha256 and s.policy and s.latency_env_ms > 0


def all_committed(settings, group_id) -> bool:
    from confluent_kafka import TopicPartition

    topic = topic_name(TOPICS.tasks, settings)
    c = make_consumer(settings, group_id)
    try:
        parts = c.list_topics(topic, timeout=10).topics[topic].partitions
        committed = c.committed([TopicPartition(topic, p) for p in parts], timeout=10)
        for tp in committed:
            _, high = c.get_watermark_offsets(TopicPartition(topic, tp.partition), timeout=10)
            if high and tp.offset != high:
                return False
        return True
    finally:
        c.close()


def test_scripted_episodes_emit_exactly_the_expected_ordered_events(settings, group_id):
    tasks = build_tasks("miniwob", ["click-test", "enter-text"], 2, prefix="ord")
    assert submit(settings, tasks) == 4
    worker = RolloutWorker(config(group_id), settings, make_client("scripted", "scripted"), "w-ordered")
    assert asyncio.run(worker.run()) == 0
    expected_steps = {"click-test": 1, "enter-text": 3}  # click | click field, type, submit
    total = sum(expected_steps[t.name] + 2 for t in tasks)
    episodes = episodes_of(read_topic(settings, TOPICS.steps, total))
    assert sorted(episodes) == sorted(f"{t.task_id}:0" for t in tasks)
    for t in tasks:
        events = episodes[f"{t.task_id}:0"]
        assert_well_formed(events)
        assert [e.kind for e in events] == ["started"] + ["step"] * expected_steps[t.name] + ["ended"]
        assert events[-1].reason == "done" and events[-1].success and events[-1].outcome_reward > 0
        assert all(s.policy == "scripted" and s.policy_version == 0 and s.logprob == 0.0 for s in events[1:-1])
    assert worker.counters.successes == 4 and worker.counters.aborted == 0
    assert all_committed(settings, group_id)
    status = (settings.data_path / "rollout" / "w-ordered.json").read_bytes()
    assert b'"episodes":4' in status and b'"final":true' in status


class MissAndKill(PolicyClient):
    """Clicks the instruction bar (never ends a task); kills Chromium at step 1 of the first episode."""

    backend = "test"

    def __init__(self, worker_ref: list) -> None:
        super().__init__("miss")
        self.worker_ref, self.killed = worker_ref, False

    async def act(self, request) -> PolicyReply:
        if not self.killed and request.step_index == 1:
            self.killed = True
            os.kill(self.worker_ref[0]._shared["browser"].pid, signal.SIGKILL)
        return PolicyReply(Decision(action=Click(x=0.5, y=0.05), logprob=-1.0), self.version)


def test_killing_the_browser_aborts_the_episode_and_the_worker_carries_on(settings, group_id):
    tasks = [TaskSpec(task_id=f"kill.{i}", suite="miniwob", name="click-test", seed=i, max_steps=3) for i in range(2)]
    submit(settings, tasks)
    ref: list = []
    worker = RolloutWorker(config(group_id, sandboxes=1, max_attempts=2), settings, MissAndKill(ref), "w-kill")
    ref.append(worker)
    assert asyncio.run(worker.run()) == 0
    episodes = episodes_of(read_topic(settings, TOPICS.steps, 3 + 5 + 5))
    first = next(eid for eid, events in episodes.items() if events[-1].kind == "aborted")[:-2]
    other = "kill.1" if first == "kill.0" else "kill.0"
    assert sorted(episodes) == sorted([f"{first}:0", f"{first}:1", f"{other}:0"])
    crashed = episodes[f"{first}:0"]
    assert_well_formed(crashed)
    assert crashed[-1].kind == "aborted" and crashed[-1].infra_failure and "crash" in crashed[-1].reason
    for eid in (f"{first}:1", f"{other}:0"):  # the retry and the next task ran on a relaunched browser
        assert_well_formed(episodes[eid])
        assert episodes[eid][-1].kind == "ended" and episodes[eid][-1].reason == "step_budget"
    assert worker.counters.sandbox_restarts == 1 and worker.counters.infra_failures == 1
    assert all_committed(settings, group_id)


def submit_round_robin(settings, tasks) -> None:
    """Every partition gets tasks, so each worker of the group has some to run (not left to key hashing)."""
    producer, tracker = make_producer(settings), DeliveryTracker()
    topic = topic_name(TOPICS.tasks, settings)
    for i, t in enumerate(tasks):
        producer.produce(topic, key=t.task_id.encode(), value=encode(t), partition=i % TOPICS.tasks.partitions,
                         on_delivery=tracker)
    flush_or_raise(producer, tracker)


def test_two_workers_in_one_group_split_the_tasks_without_duplicates(settings, group_id):
    tasks = build_tasks("miniwob", ["click-test", "click-test-2", "click-button"], 4, prefix="split")
    # idle exit well above a rebalance's duration: under load the second join took over 8 s, the
    # first worker idled out before any task was submitted, and the other one ran them all
    workers = [RolloutWorker(config(group_id, idle_exit_s=20.0), settings, make_client("scripted", "scripted"), f"w{i}")
               for i in range(2)]

    async def assigned(w) -> bool:
        def check():
            with w._consumer_lock:
                try:
                    return w._consumer is not None and bool(w._consumer.assignment())
                except RuntimeError:  # the worker already stopped and closed it
                    return False
        return w._consumer is not None and await asyncio.to_thread(check)

    async def submit_when_both_assigned():
        end = time.time() + 60
        while time.time() < end and not all([await assigned(w) for w in workers]):
            await asyncio.sleep(0.2)
        await asyncio.to_thread(submit_round_robin, settings, tasks)

    async def main():
        return await asyncio.gather(*(w.run() for w in workers), submit_when_both_assigned())

    codes = asyncio.run(main())
    assert codes[:2] == [0, 0]
    starts = [m for m in read_topic(settings, TOPICS.steps, 3 * len(tasks)) if b'"kind":"started"' in m.value()]
    started = [decode(m.value(), EpisodeEvent) for m in starts]
    assert sorted(e.task.task_id for e in started) == sorted(t.task_id for t in tasks)  # each exactly once
    by_worker = defaultdict(int)
    for e in started:
        by_worker[e.worker_id] += 1
    assert set(by_worker) == {"w0", "w1"}, by_worker
    assert all_committed(settings, group_id)


def test_malformed_tasks_go_to_the_dead_letter_topic(settings, group_id):
    producer, tracker = make_producer(settings), DeliveryTracker()
    topic = topic_name(TOPICS.tasks, settings)
    good = TaskSpec(task_id="dlq.good", suite="miniwob", name="click-test", seed=1)
    unknown = good.model_copy(update={"task_id": "dlq.unknown", "name": "click-nothing"})
    for key, value in [(b"dlq.bad", b'{"task_id": "dlq.bad", "suite": "miniwob"'), (b"dlq.unknown", encode(unknown)),
                       (b"dlq.good", encode(good))]:
        producer.produce(topic, key=key, value=value, on_delivery=tracker)
    flush_or_raise(producer, tracker)
    worker = RolloutWorker(config(group_id, sandboxes=1), settings, make_client("scripted", "scripted"), "w-dlq")
    assert asyncio.run(worker.run()) == 0
    letters = [decode(m.value(), DeadLetter) for m in read_topic(settings, TOPICS.dlq, 2)]
    assert sorted(m for m in (l.original_key for l in letters)) == sorted(["ZGxxLmJhZA==", "ZGxxLnVua25vd24="])
    assert all(l.stage == "rollout" and l.source_topic == topic for l in letters)
    assert any("click-nothing" in l.message for l in letters)
    episodes = episodes_of(read_topic(settings, TOPICS.steps, 3))
    assert list(episodes) == ["dlq.good:0"] and episodes["dlq.good:0"][-1].success
    assert worker.counters.dead_letters == 2
    assert all_committed(settings, group_id)
