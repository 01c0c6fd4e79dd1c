"""The demo's cold start leaves no demonstration task behind for the RL workers: after the
annotator stops, the rollout group's offsets on the tasks topic are moved to its end."""

from __future__ import annotations

from infra.app.phases import skip_leftover_tasks
from infra.kafka import make_consumer
from infra.topics import TOPICS, topic_name
from producers.tasks import build_tasks, submit


def _take(settings, group: str, n: int, timeout_s: float = 20.0) -> list[str]:
    import time

    consumer = make_consumer(settings, group, **{"enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic_name(TOPICS.tasks, settings)])
    got, end = [], time.monotonic() + timeout_s
    try:
        while len(got) < n and time.monotonic() < end:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                got.append(msg.key().decode())
                consumer.commit(msg, asynchronous=False)
    finally:
        consumer.close()
    return got


def test_leftover_demonstrations_are_skipped_and_later_tasks_still_arrive(settings, group_id):
    demos = build_tasks("miniwob", ["click-test", "click-test-2"], 3, seed=10_000_000, prefix="demo")
    submit(settings, demos)
    played = _take(settings, group_id, 2)  # the annotator played 2 of 6 and stopped
    assert len(played) == 2
    ends = skip_leftover_tasks(settings, group_id)
    assert sum(ends.values()) == 6
    rl = build_tasks("miniwob", ["click-test"], 2, seed=0, prefix="rl")
    submit(settings, rl)
    got = _take(settings, group_id, 3, timeout_s=10.0)  # asks for more than there are
    assert sorted(got) == sorted(t.task_id for t in rl), got
