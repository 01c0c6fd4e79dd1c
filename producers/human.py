"""A person as the policy: the annotation sessions behind `flywheel ui`'s Annotate view.

A ``HumanSession`` runs one episode through ``producers.episode.run_episode``, the loop every
rollout worker uses, in a browser sandbox of its own, with a ``HumanClient`` whose ``act`` shows
the screen to the person and waits for their action. A demonstration is therefore made of the
same events a scripted one is (started, step..., ended | aborted), under the policy
``human:<name>``, with ``sampled`` false (kept out of PPO, like a scripted solver's), produced to
flywheel.steps.v1 keyed by episode id; the streams score it with the task's own verifier and
route a success to flywheel.sft.v1, where `flywheel bc --demos-from human` finds it.

Delivery: the events are produced by the idempotent producer (acks=all) as the episode goes;
a session's ``View`` of the episode's end is returned only after the broker acknowledged all of
them (``DemoPublisher.acked``). A person who leaves (no action for ``idle_timeout_s``) or a
session closed before its end gets the episode aborted (``HumanLeft``: never trained on).

``HumanSessions`` bounds how many sandboxes are open at once, closes idle sessions and keeps one
sandbox of a cleanly ended session warm for the next.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable

from infra.runtime.kafka_clients import DeliveryTracker, make_producer
from infra.runtime.policy import Decision
from infra.runtime.settings import Settings
from infra.runtime.topics import TOPICS, topic_name
from producers import scripted
from producers.episode import EpisodeResult, run_episode
from producers.policy_client import PolicyClient, PolicyReply, PolicyRequest
from producers.suites import family
from producers.tasks import check_task
from schemas.actions import Finished
from schemas.codec import encode
from schemas.events import EpisodeStarted, Observation, Step, TaskSpec

log = logging.getLogger("flywheel.human")
HUMAN = "human"  # the policy family of people: ``human:<name>``
WORKER_ID = "ui-annotate"
BROWSER_FAMILIES = ("miniwob", "games")  # what the Annotate view's browser sandbox runs
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}")
MAX_SEED = 2**31 - 1
SPARE_SANDBOXES = 1
CLOSE_WAIT_S = 30.0  # a closed session's episode gets this long to end (aborted) before it is cancelled


class HumanLeft(RuntimeError):
    """The person stopped annotating (idle past the timeout, or the session was closed)."""


def human_policy(name: str) -> str:
    """``human:<name>``; ValueError unless ``name`` is 1-64 letters, digits, ``_ . -``."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(f"{str(name)[:40]!r} is not a name (1-64 letters, digits, _ . -; starting with a letter or digit)")
    return f"{HUMAN}:{name}"


def annotation_task(name: str, seed: int, max_steps: int, timeout_s: float, now: float | None = None) -> TaskSpec:
    """The TaskSpec of one annotation episode; ValueError naming what is wrong with ``name`` or ``seed``."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
        raise ValueError(f"seed must be an integer in [0, {MAX_SEED}]")
    suite = family(name, "miniwob")
    if suite not in BROWSER_FAMILIES:
        raise ValueError(f"task {name[:60]!r} is a {suite} task: the Annotate view runs browser tasks")
    task = TaskSpec(task_id=f"human.{name}.{seed}.{uuid.uuid4().hex[:8]}", suite=suite, name=name, seed=seed,
                    max_steps=max_steps, timeout_s=timeout_s, submitted_at=time.time() if now is None else now)
    check_task(task)
    return task


@dataclass
class View:
    """What the page shows after each action: the screen, and the episode's end when it ended."""

    step: int
    screenshot_sha256: str
    width: int
    height: int
    instruction: str
    done: bool = False
    status: str = ""  # ended | aborted, once done
    reason: str = ""
    reward: float = 0.0
    success: bool = False
    episode_id: str = ""

    @classmethod
    def of(cls, obs: Observation, step: int, episode_id: str) -> "View":
        return cls(step, obs.screenshot.sha256, obs.screen_width, obs.screen_height, obs.instruction,
                   episode_id=episode_id)


class HumanClient(PolicyClient):
    """A policy client whose decision is the person's: ``act`` publishes the screen on ``views``
    and waits on ``actions`` for ``(action, thought)``; ``(None, why)`` or a wait longer than
    ``idle_timeout_s`` raises HumanLeft. An empty thought is the scripted solvers' Thought for the
    action (scripted.thought), as on their demonstrations."""

    backend = "human"
    sampled = False  # a person's action, not a draw: logprob 0.0 is no policy's probability

    def __init__(self, name: str, idle_timeout_s: float) -> None:
        super().__init__(name)
        self.idle_timeout_s = idle_timeout_s
        self.actions: asyncio.Queue = asyncio.Queue()
        self.views: asyncio.Queue = asyncio.Queue()
        self.episode_id = ""

    async def act(self, request: PolicyRequest) -> PolicyReply:
        await self.views.put(View.of(request.obs.observation, request.step_index, self.episode_id))
        try:
            action, thought = await asyncio.wait_for(self.actions.get(), self.idle_timeout_s)
        except asyncio.TimeoutError:
            raise HumanLeft(f"no action for {self.idle_timeout_s:.0f}s") from None
        if action is None:
            raise HumanLeft(thought or "session closed")
        return PolicyReply(Decision(action=action, logprob=0.0, thought=thought or scripted.thought(action)),
                           self.version)


class DemoPublisher:
    """Produces episode events to flywheel.steps.v1 (keyed by episode id) and says when all are acknowledged."""

    def __init__(self, settings: Settings, producer: Any = None) -> None:
        self.topic, self.settings = topic_name(TOPICS.steps, settings), settings
        self._producer = producer

    @property
    def producer(self) -> Any:
        if self._producer is None:  # made at the first demonstration: the UI runs without a broker too
            self._producer = make_producer(self.settings)
        return self._producer

    def produce(self, event: Any, tracker: DeliveryTracker) -> None:
        self.producer.produce(self.topic, key=event.episode_id.encode(), value=encode(event), on_delivery=tracker)
        self.producer.poll(0)

    async def acked(self, tracker: DeliveryTracker, expected: int, timeout_s: float = 30.0) -> None:
        """Return once ``expected`` events are acknowledged; raise on a failure or past ``timeout_s``."""
        end = time.monotonic() + timeout_s
        while tracker.acked + len(tracker.failures) < expected:
            if time.monotonic() > end:
                raise TimeoutError(f"the broker acknowledged {tracker.acked} of {expected} events in {timeout_s:.0f}s; "
                                   "the producer retries for minutes, so the episode may still arrive: look for it "
                                   "in the Episodes view before recording it again")
            await asyncio.to_thread(self.producer.poll, 0.05)
        tracker.raise_if_failed()

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(10)
            self._producer = None  # its threads go with it, not retrying a broker that has gone


class HumanSession:
    """One person, one task, one sandbox, one episode."""

    def __init__(self, task: TaskSpec, policy: str, sandbox: Any, publisher: DemoPublisher,
                 idle_timeout_s: float) -> None:
        self.id = uuid.uuid4().hex
        self.task, self.sandbox, self.publisher = task, sandbox, publisher
        self.client = HumanClient(policy, idle_timeout_s)
        self.tracker, self.produced = DeliveryTracker(), 0
        self.last_used = time.monotonic()
        self.last_view: View | None = None
        self._runner: asyncio.Task | None = None
        self._lock = asyncio.Lock()  # one action at a time: a double click waits for the first

    async def start(self) -> View:
        self._runner = asyncio.create_task(self._run())
        return await self._next_view()

    async def act(self, action: Any, thought: str = "") -> View:
        async with self._lock:
            if self.done:
                return self.last_view
            self.last_used = time.monotonic()
            await self.client.actions.put((action, thought))
            return await self._next_view()

    async def finish(self) -> View:
        """The person says the task is done: a ``finished`` step ends the episode (the task's own
        verifier judges it, as it would any policy's)."""
        return await self.act(Finished())

    async def close(self, why: str = "session closed") -> bool:
        """End the episode (aborted if it was still going); -> whether the sandbox is fit for
        another session (its episode ran to an end without a crash). The caller owns the sandbox."""
        if self._runner is not None and not self._runner.done():
            await self.client.actions.put((None, why))
            try:
                await asyncio.wait_for(asyncio.shield(self._runner), CLOSE_WAIT_S)
            except Exception as exc:  # noqa: BLE001 - closing: the episode is aborted either way
                log.warning("session %s closed with %r", self.id, exc)
            if not self._runner.done():  # a hung sandbox: the episode must not outlive its sandbox
                self._runner.cancel()
                await asyncio.wait({self._runner}, timeout=CLOSE_WAIT_S)
        runner = self._runner
        if runner is None or not runner.done() or runner.cancelled() or runner.exception() is not None:
            return False
        return not runner.result().crashed

    @property
    def done(self) -> bool:
        return self.last_view is not None and self.last_view.done

    async def _next_view(self) -> View:
        getter = asyncio.ensure_future(self.client.views.get())
        await asyncio.wait({getter, self._runner}, return_when=asyncio.FIRST_COMPLETED)
        if not getter.done():
            getter.cancel()
            self._runner.result()  # a failure of the run itself (a bug, the broker): raise it here
            raise RuntimeError("the episode stopped without an end view")
        self.last_view = getter.result()
        self.last_used = time.monotonic()
        return self.last_view

    async def _run(self) -> EpisodeResult:
        last: list[Step] = []

        def emit(event: Any) -> None:
            if isinstance(event, EpisodeStarted):
                self.client.episode_id = event.episode_id
            elif isinstance(event, Step):
                last[:] = [event]
            self.publisher.produce(event, self.tracker)
            self.produced += 1

        result = await run_episode(self.task, self.sandbox, self.client, emit, sandbox_name="browser",
                                   worker_id=WORKER_ID)
        await self.publisher.acked(self.tracker, self.produced)
        await self.client.views.put(end_view(result, last[0] if last else None, self.last_view))
        return result


def end_view(result: EpisodeResult, last_step: Step | None, shown: View | None) -> View:
    """The page's last view: the screen the last step produced, and how the episode ended."""
    sha = last_step.next_screenshot_sha256 if last_step is not None else None
    return View(step=result.num_steps, screenshot_sha256=sha or (shown.screenshot_sha256 if shown else ""),
                width=shown.width if shown else 0, height=shown.height if shown else 0,
                instruction=shown.instruction if shown else "", done=True, status=result.status,
                reason=result.reason, reward=result.reward, success=result.success, episode_id=result.episode_id)


@dataclass
class SessionLimits:
    """How much of the machine the Annotate view may hold."""

    max_sessions: int = 4  # sandboxes open at once (a person each)
    idle_timeout_s: float = 300.0  # a session without an action this long is closed, its episode aborted
    max_steps: int = 50  # step budget of an annotation episode
    episode_timeout_s: float = 1800.0  # an annotation episode's whole length, at a person's pace


class SessionFull(RuntimeError):
    """Every annotation slot is taken."""


class HumanSessions:
    """The open annotation sessions: at most ``limits.max_sessions``, each closed when its episode
    ends or after ``limits.idle_timeout_s`` without an action. ``make_sandbox()`` gives a started
    sandbox for a new session."""

    def __init__(self, publisher: DemoPublisher, make_sandbox: Callable[[], Any], limits: SessionLimits) -> None:
        self.publisher, self.make_sandbox, self.limits = publisher, make_sandbox, limits
        self.sessions: dict[str, HumanSession] = {}
        self.spare: list[Any] = []  # a sandbox whose session ended cleanly, kept warm for the next one
        self._opening = 0
        self._closing = 0  # sessions taken out but whose sandbox is not closed yet: they still hold one

    async def open(self, task: TaskSpec, policy: str) -> tuple[HumanSession, View]:
        await self.reap()
        if len(self.sessions) + self._opening + self._closing >= self.limits.max_sessions:
            raise SessionFull(f"all {self.limits.max_sessions} annotation sessions are in use; finish one first")
        self._opening += 1  # counted while its sandbox starts: two requests at once cannot both take the last slot
        try:
            sandbox = self.spare.pop() if self.spare else await self.make_sandbox()
        finally:
            self._opening -= 1
        session = HumanSession(task, policy, sandbox, self.publisher, self.limits.idle_timeout_s)
        self.sessions[session.id] = session
        try:
            view = await session.start()
        except BaseException:
            await self.drop(session.id)
            raise
        if view.done:
            await self.drop(session.id)
        return session, view

    def get(self, session_id: str) -> HumanSession | None:
        return self.sessions.get(session_id)

    async def drop(self, session_id: str, why: str = "session closed") -> None:
        session = self.sessions.pop(session_id, None)
        if session is None:
            return
        self._closing += 1
        try:
            if await session.close(why) and len(self.spare) < SPARE_SANDBOXES:
                self.spare.append(session.sandbox)  # a new context costs ~1.5 s; a reset a tenth of it
            else:
                await session.sandbox.close()
        finally:
            self._closing -= 1

    async def reap(self, now: float | None = None) -> None:
        """Close the sessions whose episode ended or whose person left."""
        now = time.monotonic() if now is None else now
        idle = [sid for sid, s in list(self.sessions.items()) if s.done or now - s.last_used > self.limits.idle_timeout_s]
        # at once, as in close(): each may wait CLOSE_WAIT_S, and an open() waits for the reaping
        await asyncio.gather(*(self.drop(sid, f"no action for {self.limits.idle_timeout_s:.0f}s") for sid in idle))

    async def close(self) -> None:
        # at once: each may wait CLOSE_WAIT_S for its episode to stop
        await asyncio.gather(*(self.drop(sid, "ui stopped") for sid in list(self.sessions)))
        while self.spare:
            await self.spare.pop().close()
