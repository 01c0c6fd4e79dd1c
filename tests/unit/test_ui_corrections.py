"""A person's correction of a failed episode -> an error-correction pair (no broker, no ClickHouse)."""

from __future__ import annotations

import asyncio
import threading

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from confluent_kafka import KafkaException

from app.ui import correct as corrector
from app.ui import corrections
from app.ui.corrections import correction_pair
from app.ui.queries import UiInputError
from app.ui.server import make_app
from infra.runtime.settings import load_settings
from schemas.actions import Click
from schemas.codec import encode
from schemas.events import BlobRef, Observation, Step, TaskSpec, Trajectory


def failed(n: int = 3, success: bool = False) -> Trajectory:
    task = TaskSpec(task_id="t1", suite="miniwob", name="click-dialog", seed=7)
    steps = [Step(episode_id="ep-1", ts=1.0, step_index=i, started_at=1.0, policy="pixel-miniwob", policy_version=2,
                  observation=Observation(screenshot=BlobRef(sha256=f"{i:064x}", uri=f"file:///{i}"), screen_width=160,
                                          screen_height=210, instruction="Close the dialog"),
                  action=Click(x=0.1, y=0.9), thought="down there", logprob=-3.0) for i in range(n)]
    return Trajectory(episode_id="ep-1", task=task, sandbox="browser", worker_id="w", policy="pixel-miniwob",
                      steps=steps, status="ended", success=success, started_at=1.0, ended_at=2.0)


def test_a_correction_is_an_error_correction_pair_of_the_person():
    body = {"tau": 1, "action": {"type": "click", "x": 104, "y": 84}, "thought": "the x closes it"}
    pair = correction_pair(failed(), body, "human:alice", 5.0)
    assert (pair.kind, pair.tau, pair.step_index, pair.annotator) == ("error_correction", 1, 1, "human:alice")
    assert (pair.chosen.action.x, pair.chosen.action.y, pair.chosen.thought) == (0.65, 0.4, "the x closes it")
    assert pair.rejected.action == Click(x=0.1, y=0.9) and pair.rejected.thought == "down there"
    assert [s.step_index for s in pair.history] == [0] and pair.observation.screenshot.sha256 == f"{1:064x}"
    assert pair.task.seed == 7 and pair.event_id.startswith("ep-1:error_correction:human:alice")


def test_an_empty_thought_is_the_solvers_thought_for_the_action():
    pair = correction_pair(failed(), {"tau": 0, "action": {"type": "type", "text": "hi"}}, "human:a", 5.0)
    assert pair.chosen.action.content == "hi" and "hi" in pair.chosen.thought


@pytest.mark.parametrize("body,field", [
    ({"tau": 3, "action": {"type": "click", "x": 1, "y": 1}}, "tau"),
    ({"tau": -1, "action": {"type": "click", "x": 1, "y": 1}}, "tau"),
    ({"tau": "0; DROP", "action": {"type": "click", "x": 1, "y": 1}}, "tau"),
    ({"tau": 0, "action": {"type": "click", "x": 500, "y": 1}}, "x"),
    ({"tau": 0, "action": "click"}, "body"),
    ({"tau": 0, "action": {"type": "file_write", "path": "/etc/passwd"}}, "type"),
    ({"tau": 0, "action": {"type": "click", "x": 1, "y": 1}, "thought": "t" * 5000}, "thought"),
])
def test_hostile_corrections_are_refused_naming_the_field(body, field):
    with pytest.raises(UiInputError, match=f"^{field}:"):
        correction_pair(failed(), body, "human:a", 5.0)


@pytest.mark.parametrize("action", [
    {"type": "click", "x": 16, "y": 189},  # step 0's own click, Click(x=0.1, y=0.9) on 160 x 210
    {"type": "click", "x": 16.8, "y": 188.3},  # within a pixel of it
])
def test_a_correction_that_repeats_the_wrong_action_is_refused(action):
    with pytest.raises(UiInputError, match="^action: the same"):
        correction_pair(failed(), {"tau": 0, "action": action}, "human:a", 5.0)


def test_a_correction_two_pixels_away_or_of_another_kind_is_kept():
    for action in ({"type": "click", "x": 18, "y": 189}, {"type": "left_double", "x": 16, "y": 189}):
        assert correction_pair(failed(), {"tau": 0, "action": action}, "human:a", 5.0).chosen.action.type


def test_a_succeeded_episode_is_not_corrected():
    with pytest.raises(UiInputError, match="^episode:.*succeeded"):
        correction_pair(failed(success=True), {"tau": 0, "action": {"type": "click", "x": 1, "y": 1}}, "human:a", 5.0)


def _correct(monkeypatch, read, find=None, publish=None):
    """(status, text) of a correction of ep-1 through the app; ``read``, ``find`` and ``publish``
    stand in for ClickHouse and the broker."""
    if find is not None:
        monkeypatch.setattr(corrections, "find_trajectory", find)
    if publish is not None:
        monkeypatch.setattr(corrections, "publish_pair", publish)

    async def go():
        app = make_app(load_settings({}))
        app[corrections.READ_KEY] = read  # ClickHouse as the test says
        async with TestClient(TestServer(app)) as client:
            body = {"episode": "ep-1", "tau": 0, "name": "alice", "action": {"type": "click", "x": 1, "y": 1}}
            resp = await client.post("/api/corrections", json=body, headers={
                "Origin": f"http://{client.host}:{client.port}"})
            return resp.status, await resp.text()

    return asyncio.run(go())


def _ended(*_a):
    return [{"ended_ms": 2000, "ingested_ms": 3000, "success": 0}]


def _broker_down(*_a, **_k):
    raise KafkaException("Failed to get metadata: Local: Broker transport failure")


def test_a_correction_with_the_broker_down_is_a_502_naming_it(monkeypatch):
    status, text = _correct(monkeypatch, _ended, find=_broker_down)
    assert status == 502 and "Broker transport failure" in text and "flywheel.trajectories" in text


def test_a_correction_not_acknowledged_is_a_502(monkeypatch):
    status, text = _correct(monkeypatch, _ended, find=lambda *_a, **_k: failed(), publish=_broker_down)
    assert status == 502 and "flywheel.pairs" in text


def test_a_correction_with_clickhouse_down_is_a_502(monkeypatch):
    def down(*_a):
        raise ConnectionRefusedError("[Errno 111] Connection refused")

    status, text = _correct(monkeypatch, down)
    assert status == 502 and "ClickHouse" in text and "Connection refused" in text


def test_a_correction_of_an_episode_not_found_is_a_404(monkeypatch):
    status, text = _correct(monkeypatch, lambda *_a: [])
    assert status == 404 and "ep-1" in text


class Message:
    def __init__(self, offset: int, ts_ms: int, key: bytes, value: bytes = b"") -> None:
        self._offset, self._ts, self._key, self._value = offset, ts_ms, key, value

    def error(self):
        return None

    def key(self):
        return self._key

    def value(self):
        return self._value

    def offset(self):
        return self._offset

    def partition(self):
        return 0

    def timestamp(self):
        return (1, self._ts)


class BusyTopic:
    """One partition: ep-1's trajectory at offset 0 (time 2500 ms), then a record a second of other
    episodes, a million of them (an episode corrected long after it ran)."""

    def __init__(self) -> None:
        self.polls = 0

    def list_topics(self, topic, timeout):
        return type("Meta", (), {"topics": {topic: type("T", (), {"partitions": {0: None}})()}})()

    def offsets_for_times(self, tps, timeout):
        return [type(tp)(tp.topic, tp.partition, 0) for tp in tps]

    def get_watermark_offsets(self, tp, timeout):
        return 0, 1_000_000

    def assign(self, tps):
        pass

    def poll(self, _timeout):
        self.polls += 1
        n = self.polls - 1
        if n == 0:
            return Message(0, 2500, b"ep-1", encode(failed()))
        return Message(n, 2500 + 1000 * n, b"ep-other")

    def close(self):
        pass


def test_the_trajectory_read_stops_after_the_sink_ingested_it(monkeypatch):
    topic = BusyTopic()
    monkeypatch.setattr(corrections, "make_consumer", lambda *_a, **_k: topic)
    traj = corrections.find_trajectory(load_settings({}), "ep-1", 2000, until_ms=3000 + 120_000, timeout_s=2)
    assert traj is not None and traj.episode_id == "ep-1"
    assert topic.polls < 200  # the records past the sink's ingestion time plus a margin are not read


def test_corrections_run_in_their_own_bounded_threads_not_the_views():
    """A slow correction (reading the trajectories topic, up to ~40 s) takes one of the
    corrections' AT_ONCE threads, never the default pool the Run and Episodes views read with."""
    app = web.Application()
    corrections.add_routes(app, None, None)
    pool = app[corrections.POOL_KEY]
    try:
        assert pool._max_workers == corrections.AT_ONCE
        name = asyncio.run(corrections._io(pool, "testing", lambda: threading.current_thread().name))
        assert name.startswith("ui-corrections")
    finally:
        pool.shutdown()


@pytest.mark.parametrize("extra", [["--corrections", "3"], ["--tasks", "click-tab-2"], ["--tasks", "no-routine"],
                                   ["--n", "5"]])
def test_the_corrector_refuses_choosing_options_beside_named_episodes(extra, capsys, monkeypatch):
    """--episodes corrects exactly what it names: an option that chooses among failures is refused, not ignored."""
    def not_reached(*_a, **_k):
        raise AssertionError("the corrector ran")
    monkeypatch.setattr(corrector, "correct", not_reached)
    with pytest.raises(SystemExit) as exit_:
        corrector.main(["--episodes", "ep-1", *extra])
    assert exit_.value.code == 2
    assert "--episodes corrects exactly the episodes it names" in capsys.readouterr().err
