"""Annotation sessions without Kafka or a browser: an in-memory sandbox, a producer that acknowledges."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest

from producers import human
from producers.human import DemoPublisher, HumanSessions, SessionFull, SessionLimits, annotation_task, human_policy
from producers.sandboxes.base import Obs, StepResult
from schemas.actions import Click, Type
from schemas.codec import decode
from schemas.events import BlobRef, Observation
from infra.runtime.kafka_clients import DeliveryTracker
from infra.runtime.settings import load_settings


def obs(i: int) -> Obs:
    ref = BlobRef(sha256=f"{i:064x}", uri=f"file:///{i}")
    return Obs(Observation(screenshot=ref, screen_width=160, screen_height=210, instruction="click ONE"),
               np.zeros((4, 4, 3), np.uint8))


class Sandbox:
    """Done with success after a click in the left half, then ``done_after`` steps in all."""

    def __init__(self, done_after: int = 2) -> None:
        self.n, self.done_after, self.closed = 0, done_after, False

    async def reset(self, task):
        return obs(0)

    async def step(self, action):
        self.n += 1
        if action.type == "finished":
            return StepResult(obs=obs(self.n), reward=0.0, done=True)
        done = self.n >= self.done_after and action.type == "click" and action.x < 0.5
        return StepResult(obs=obs(self.n), reward=1.0 if done else 0.0, done=done, success=done)

    async def close(self):
        self.closed = True


class Producer:
    def __init__(self, fail: bool = False) -> None:
        self.records, self.fail = [], fail

    def produce(self, topic, key, value, on_delivery):
        self.records.append((topic, key, value))
        on_delivery("broker down" if self.fail else None, None)

    def poll(self, _t):
        return 0

    def flush(self, _t):
        return 0


def sessions(producer, limits=SessionLimits()):
    made = []

    async def make_sandbox():
        await asyncio.sleep(0.01)  # a browser context takes a while: other requests run meanwhile
        made.append(Sandbox())
        return made[-1]

    return HumanSessions(DemoPublisher(load_settings({}), producer), make_sandbox, limits), made


def events(producer):
    from schemas.events import EpisodeEvent

    return [decode(value, EpisodeEvent) for _topic, _key, value in producer.records]


def test_a_session_publishes_the_demonstration_under_the_human_policy():
    producer = Producer()

    async def go():
        hs, made = sessions(producer)
        session, first = await hs.open(annotation_task("click-test", 3, 10, 600), human_policy("alice"))
        assert (first.step, first.done, first.instruction) == (0, False, "click ONE")
        second = await session.act(Type(content="x"), "I type")
        assert (second.step, second.done) == (1, False)
        end = await session.act(Click(x=0.25, y=0.5))
        await hs.reap()
        kept = list(hs.spare)
        await hs.close()
        return end, made, hs, kept

    end, made, hs, kept = asyncio.run(go())
    assert end.done and end.success and end.status == "ended" and end.step == 2
    assert end.screenshot_sha256 == obs(2).observation.screenshot.sha256  # the screen the last action produced
    evs = events(producer)
    assert [e.kind for e in evs] == ["started", "step", "step", "ended"]
    assert {e.policy for e in evs if e.kind in ("started", "step")} == {"human:alice"}
    steps = [e for e in evs if e.kind == "step"]
    assert [s.sampled for s in steps] == [False, False] and steps[0].thought == "I type"
    assert steps[1].thought  # empty thought: the solvers' Thought for the action
    assert all(key == evs[0].episode_id.encode() for _t, key, _v in producer.records)
    assert kept == made and made[0].closed and not hs.sessions  # kept warm after a clean end, closed with the UI


def test_finish_ends_the_episode_and_a_closed_session_is_aborted():
    producer = Producer()

    async def go():
        hs, made = sessions(producer)
        s1, _ = await hs.open(annotation_task("click-test", 1, 10, 600), human_policy("bob"))
        finished = await s1.finish()
        s2, _ = await hs.open(annotation_task("click-test", 2, 10, 600), human_policy("bob"))
        await hs.drop(s2.id, "closed by the person")
        return finished, made

    finished, made = asyncio.run(go())
    assert len(made) == 1  # the second session reset the first one's sandbox
    assert finished.done and not finished.success and finished.status == "ended"
    kinds = [e.kind for e in events(producer)]
    assert kinds == ["started", "step", "ended", "started", "aborted"]


def test_sessions_are_bounded_and_idle_ones_are_reaped():
    async def go():
        hs, made = sessions(Producer(), SessionLimits(max_sessions=1, idle_timeout_s=5))
        await hs.open(annotation_task("click-test", 1, 10, 600), human_policy("c"))
        with pytest.raises(SessionFull):
            await hs.open(annotation_task("click-test", 2, 10, 600), human_policy("c"))
        import time

        await hs.reap(now=time.monotonic() + 6)
        return hs, made

    hs, made = asyncio.run(go())
    assert not hs.sessions and hs.spare == made and not made[0].closed


def test_an_unacknowledged_demonstration_is_an_error_not_a_success():
    async def go():
        hs, _ = sessions(Producer(fail=True))
        session, _ = await hs.open(annotation_task("click-test", 1, 10, 600), human_policy("d"))
        await session.act(Click(x=0.1, y=0.1))
        return await session.act(Click(x=0.1, y=0.1))

    with pytest.raises(Exception, match="not delivered"):
        asyncio.run(go())


def test_a_sandbox_whose_run_failed_is_closed_not_reused():
    async def go():
        hs, made = sessions(Producer(fail=True))
        session, _ = await hs.open(annotation_task("click-test", 1, 10, 600), human_policy("e"))
        await session.act(Click(x=0.1, y=0.1))
        with pytest.raises(Exception, match="not delivered"):
            await session.act(Click(x=0.1, y=0.1))
        await hs.drop(session.id, "failed")
        return hs, made

    hs, made = asyncio.run(go())
    assert made[0].closed and not hs.spare


@pytest.mark.parametrize("name", ["", "a b", "x' OR 1=1", "<script>", "a" * 65, "-lead", "é"])
def test_hostile_names_are_refused(name):
    with pytest.raises(ValueError):
        human_policy(name)


@pytest.mark.parametrize("task,seed", [("no-such-task", 0), ("../../etc/passwd", 0), ("click-test", -1),
                                       ("click-test", 2**31), ("click-test", True), ("desktop.write-file", 0)])
def test_hostile_tasks_and_seeds_are_refused(task, seed):
    with pytest.raises(ValueError):
        annotation_task(task, seed, 10, 600)


def test_two_sessions_opened_at_once_cannot_both_take_the_last_slot():
    async def go():
        hs, _ = sessions(Producer(), SessionLimits(max_sessions=1))
        return await asyncio.gather(hs.open(annotation_task("click-test", 1, 10, 600), human_policy("f")),
                                    hs.open(annotation_task("click-test", 2, 10, 600), human_policy("g")),
                                    return_exceptions=True)

    results = asyncio.run(go())
    assert sum(isinstance(r, SessionFull) for r in results) == 1 and sum(isinstance(r, tuple) for r in results) == 1


class StuckSandbox(Sandbox):
    async def step(self, action):
        await asyncio.sleep(3600)  # a page that never answers


async def stuck_session(max_sessions: int = 4):
    """(sessions, a session whose runner is stuck in its sandbox's step, the pending act, sandboxes made)."""
    made = []

    async def make_sandbox():
        made.append(StuckSandbox())
        return made[-1]

    hs = HumanSessions(DemoPublisher(load_settings({}), Producer()), make_sandbox, SessionLimits(max_sessions))
    session, _ = await hs.open(annotation_task("click-test", 1, 10, 600), human_policy("h"))
    acting = asyncio.ensure_future(session.act(Click(x=0.1, y=0.1)))
    await asyncio.sleep(0.01)
    return hs, session, acting, made


def test_closing_a_session_whose_sandbox_hangs_stops_its_episode(monkeypatch):
    monkeypatch.setattr(human, "CLOSE_WAIT_S", 0.05)

    async def go():
        hs, session, acting, made = await stuck_session()
        await hs.drop(session.id, "closed by the person")
        stopped = session._runner.done()
        for task in (acting, session._runner):  # without the fix: stop it here, not at the loop's end
            task.cancel()
        await asyncio.wait({acting, session._runner}, timeout=1)
        return stopped, made

    stopped, made = asyncio.run(go())
    assert stopped and made[0].closed


class Silent(Producer):
    def produce(self, topic, key, value, on_delivery):
        self.records.append((topic, key, value))  # queued; the broker never answers


def test_a_demonstration_not_acknowledged_in_time_says_it_may_still_arrive():
    """The producer keeps retrying after the page's wait: the person must not take the error for a
    loss and record the episode twice."""
    publisher = DemoPublisher(load_settings({}), Silent())
    with pytest.raises(TimeoutError, match="0 of 3 events.*may still arrive.*Episodes view"):
        asyncio.run(publisher.acked(DeliveryTracker(), 3, timeout_s=0.05))


def test_a_session_still_closing_holds_its_slot(monkeypatch):
    """Its sandbox is open until its episode stops: a new session meanwhile would be one sandbox past the bound."""
    monkeypatch.setattr(human, "CLOSE_WAIT_S", 0.2)

    async def go():
        hs, session, acting, made = await stuck_session(max_sessions=1)
        closing = asyncio.ensure_future(hs.drop(session.id, "closed by the person"))
        await asyncio.sleep(0.01)
        refused = await asyncio.gather(hs.open(annotation_task("click-test", 2, 10, 600), human_policy("h")),
                                       return_exceptions=True)
        await closing
        acting.cancel()
        await asyncio.wait({acting}, timeout=1)
        return refused[0], made

    refused, made = asyncio.run(go())
    assert isinstance(refused, SessionFull) and len(made) == 1


def test_the_ui_stopping_closes_its_sessions_at_once_not_one_after_another(monkeypatch):
    """Each hung session may take CLOSE_WAIT_S to stop: four in a row held the UI's exit for minutes."""
    monkeypatch.setattr(human, "CLOSE_WAIT_S", 0.5)

    async def go():
        hs, _session, first, made = await stuck_session()
        second, _ = await hs.open(annotation_task("click-test", 2, 10, 600), human_policy("h"))
        acting = [first, asyncio.ensure_future(second.act(Click(x=0.1, y=0.1)))]
        await asyncio.sleep(0.01)
        t0 = time.monotonic()
        await hs.close()
        took = time.monotonic() - t0
        for task in acting:
            task.cancel()
        await asyncio.wait(acting, timeout=1)
        return took, made

    took, made = asyncio.run(go())
    assert len(made) == 2 and all(s.closed for s in made)
    assert took < 0.9  # one after another: 1 s
