"""The demo's cold start leaves no demonstration task behind for the RL workers: after the
annotator stops, the rollout group's offsets on the tasks topic are moved to its end."""

from __future__ import annotations

from app.phases import skip_leftover_tasks
from infra.runtime.kafka_clients import make_consumer
from infra.runtime.topics import TOPICS, topic_name
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


def test_a_demo_refuses_a_run_id_used_before_in_the_data_dir(settings, tmp_path):
    """A second `flywheel demo --run-id X` would resume X's checkpoint and mix its versions,
    episodes and rows with the new run's: it is refused before anything starts."""
    import uuid
    from dataclasses import asdict

    import pytest

    from infra.runtime import versions
    from infra.runtime.admin import delete_topics, ensure_topics
    from app.demo import run_demo
    from app.demo_config import DemoConfig
    from infra.runtime.errors import UserError
    from infra.runtime.kafka_clients import DeliveryTracker, make_producer
    from infra.runtime.policy import build_policy
    from infra.runtime.settings import load_settings
    from schemas.blobs import BlobStore
    from trainer.core.publish import make_version, save_weights

    run_id = f"reused-{uuid.uuid4().hex[:6]}"
    earlier = load_settings({**asdict(settings), "topic_prefix": f"demo-{run_id}."})
    created = ensure_topics(earlier).created
    try:
        policy = build_policy("pixel", f"pixel-{run_id}", {"grid": 8, "channels": [8, 16, 16]})
        producer, tracker = make_producer(earlier), DeliveryTracker()
        versions.publish(producer, tracker, earlier, make_version(policy, save_weights(policy, BlobStore(earlier.blob_root)), parent=None))
        with pytest.raises(UserError, match="was used before"):
            run_demo(DemoConfig(run_id=run_id, minutes=1.0, report_dir=str(tmp_path / "report")), settings)
        assert not (tmp_path / "report" / "logs" / "trainer.log").exists()  # nothing was started
    finally:
        delete_topics(earlier, created)


def test_a_demo_refuses_a_run_id_whose_checkpoint_the_data_dir_keeps(settings, tmp_path):
    """A benchmark's broker starts afresh (no versions of earlier runs on it), but the data dir
    keeps the earlier run's checkpoint and rows: the run id is refused all the same."""
    import uuid

    import pytest

    from app.demo import run_demo
    from app.demo_config import DemoConfig
    from infra.runtime.errors import UserError

    run_id = f"reused-{uuid.uuid4().hex[:6]}"
    folder = settings.checkpoint_root / f"pixel-{run_id}"
    folder.mkdir(parents=True)
    try:
        (folder / "checkpoint.json").write_text("{}")
        with pytest.raises(UserError, match="was used before .* has a trainer checkpoint"):
            run_demo(DemoConfig(run_id=run_id, minutes=1.0, report_dir=str(tmp_path / "report")), settings)
        assert not (tmp_path / "report" / "logs" / "trainer.log").exists()  # nothing was started
    finally:
        (folder / "checkpoint.json").unlink()
        folder.rmdir()
