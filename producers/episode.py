"""One episode: reset a sandbox, ask the policy, step, and emit the episode's events in order.

``run_episode`` knows nothing of Kafka: it calls ``emit(event)`` for ``started``, each ``step``
and exactly one of ``ended`` / ``aborted``, in that order (the worker produces them keyed by
episode id, so they stay in order in one partition). It never raises for a sandbox or policy
failure: a crashed or hung sandbox gives ``aborted`` with infra_failure=True (never trained on as
a zero reward) and ``EpisodeResult.crashed`` tells the worker to restart the sandbox.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable

from producers import scripted
from producers.policy_client import PolicyClient, PolicyRequest
from producers.sandboxes.base import SandboxCrashed
from schemas.actions import Wait
from schemas.base import Id
from schemas.events import EpisodeAborted, EpisodeEnded, EpisodeStarted, Step, TaskSpec

log = logging.getLogger("flywheel.episode")

Emit = Callable[[Any], None]


def episode_id(task_id: str, attempt: int, execution: str | None = None) -> str:
    """One id per execution: ``<task_id>:<attempt>:<execution>``.

    A task re-run after a worker crash (the task's offset was not committed) is a new execution,
    so it never shares an id with the interrupted one, whose partial events the assembler closes
    as aborted by infrastructure. ``task_id`` and ``attempt`` stay readable on the started event
    to link the executions of one task; consumers dedupe events by their ids within an execution.
    ``execution`` is 48 random bits (a worker cannot know whether an earlier worker ran the task),
    given explicitly only by tests. A task id too long to leave room for the suffix within the
    schema's id limit is cut and followed by its own hash, so two long task ids never meet.
    """
    suffix = f":{attempt}:{execution or uuid.uuid4().hex[:12]}"
    room = _ID_MAX - len(suffix)
    if len(task_id) > room:
        task_id = f"{task_id[:room - 17]}.{hashlib.sha256(task_id.encode()).hexdigest()[:16]}"
    return task_id + suffix


_ID_MAX = Id.__metadata__[0].max_length  # the schema's limit on ids (schemas.base.Id)


@dataclass
class EpisodeResult:
    episode_id: str
    status: str  # "ended" | "aborted"
    reason: str
    num_steps: int
    reward: float = 0.0
    success: bool = False
    infra_failure: bool = False
    crashed: bool = False  # the sandbox must be restarted before its next episode


class _Abort(Exception):
    """Infrastructure gave out (sandbox, policy backend, shutdown): the episode is not the agent's fault."""

    def __init__(self, reason: str, crashed: bool) -> None:
        super().__init__(reason)
        self.reason, self.crashed = reason, crashed


async def run_episode(task: TaskSpec, sandbox: Any, client: PolicyClient, emit: Emit, *, attempt: int = 0,
                      sandbox_name: str, worker_id: str, abort: asyncio.Event | None = None,
                      clock: Callable[[], float] = time.time, step_latency_s: float = 0.0,
                      expert_labels: bool = False) -> EpisodeResult:
    """Run ``task`` in ``sandbox`` step by step, emitting every event. ``step_latency_s`` is added
    to every environment step (counted in its ``latency_env_ms``): a stand-in for a real GUI VM,
    where a step takes seconds, for comparing asynchronous and synchronous training. With
    ``expert_labels`` each step of a task with a scripted solver also records the solver's action
    on that screen (``Step.expert_action``; the page is probed for it, the policy never sees it)."""
    eid = episode_id(task.task_id, attempt)
    t0 = clock()
    deadline = time.monotonic() + task.timeout_s
    emit(EpisodeStarted(episode_id=eid, ts=t0, task=task, attempt=attempt, sandbox=sandbox_name,
                        worker_id=worker_id, policy=client.name, policy_version=client.version))
    steps: list[Step] = []
    last = None  # the latest StepResult: a game's score stands wherever the episode stops
    out = _Outbox(emit, sandbox)
    probe = hasattr(sandbox, "query") and client.needs_dom
    labels = expert_labels and hasattr(sandbox, "query") and scripted.has_solver(task.name)
    try:
        try:
            obs = await sandbox.reset(task)
        except SandboxCrashed as exc:
            raise _Abort(f"sandbox crashed on reset: {exc}", crashed=True) from None
        except ValueError as exc:  # a task this sandbox cannot run: not an infra failure
            emit(EpisodeAborted(episode_id=eid, ts=clock(), num_steps=0, reason=f"bad task: {exc}",
                                infra_failure=False))
            return EpisodeResult(eid, "aborted", f"bad task: {exc}", 0)
        for index in range(task.max_steps):
            if abort is not None and abort.is_set():
                raise _Abort("worker shutting down", crashed=False)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return await _end(out, eid, clock, "timeout", last)
            started_at = clock()
            t_policy = time.perf_counter()
            try:
                dom = await sandbox.query(scripted.DOM_PROBE_JS) if probe else None
                reply = await asyncio.wait_for(
                    client.act(PolicyRequest(task=task, obs=obs, step_index=index, history=steps, dom=dom)), remaining)
            except asyncio.TimeoutError:
                return await _end(out, eid, clock, "timeout", last)
            except SandboxCrashed as exc:
                raise _Abort(f"sandbox crashed: {exc}", crashed=True) from None
            except Exception as exc:  # noqa: BLE001 - a policy backend failure is infrastructure
                raise _Abort(f"policy {client.name} failed: {type(exc).__name__}: {exc}", crashed=False) from None
            latency_policy = (time.perf_counter() - t_policy) * 1000
            # the label of the screen the policy acted on (the page is unchanged until the action),
            # from the page the client read when it reads one
            expert = await _label(sandbox, task, obs, deadline - time.monotonic(), dom) if labels else None
            decision = reply.decision
            # The previous step is released (its screenshots stored, then it is emitted) while this
            # one acts: its write overlapped the policy's turn and now overlaps the environment's.
            released, acted = await asyncio.gather(out.release(), _act(sandbox, decision.action, step_latency_s),
                                                   return_exceptions=True)
            if isinstance(acted, SandboxCrashed):
                raise _Abort(f"sandbox crashed: {acted}", crashed=True) from None
            for outcome in (acted, released):
                if isinstance(outcome, BaseException):
                    raise outcome  # a bug in the step, loudly; else _Abort: a screenshot was not stored
            result, latency_env = acted
            step = Step(
                episode_id=eid, ts=clock(), step_index=index, started_at=started_at, observation=obs.observation,
                thought=decision.thought, action=decision.action, raw_output=decision.raw_output,
                parse_error=decision.parse_error, policy=client.name, policy_version=reply.version,
                logprob=float(decision.logprob), value=decision.value,
                sampled=bool(client.sampled if reply.sampled is None else reply.sampled),
                reward=float(result.reward), done=bool(result.done), latency_policy_ms=latency_policy,
                latency_env_ms=latency_env, error=result.error, output=_clip(getattr(result, "output", None)),
                next_screenshot_sha256=result.obs.observation.screenshot.sha256,
                expert_action=expert,
            )
            out.hold(step)
            steps.append(step)
            obs, last = result.obs, result
            if result.done:
                return await _end(out, eid, clock, "done", result)
        return await _end(out, eid, clock, "step_budget", last)
    except _Abort as exc:
        try:
            await out.release()
        except _Abort:
            out.drop()  # its screenshot never reached the blob store: the step cannot be published
        await out.settle()
        emit(EpisodeAborted(episode_id=eid, ts=clock(), num_steps=out.emitted, reason=exc.reason[:4000],
                            infra_failure=True))
        return EpisodeResult(eid, "aborted", exc.reason, out.emitted, infra_failure=True, crashed=exc.crashed)


class _Outbox:
    """Emits steps in order, each only after the screenshots it refers to are in the blob store.

    The newest step is held back until the next one is being taken (or the episode ends), so a
    sandbox that stores screenshots in the background (``flush``) overlaps that write with the
    policy's turn and the next environment step. A step whose screenshots fail to store is dropped,
    never emitted.
    """

    def __init__(self, emit: Emit, sandbox: Any) -> None:
        self.emit, self._flush = emit, getattr(sandbox, "flush", None)
        self.held: Step | None = None
        self.emitted = 0

    def hold(self, step: Step) -> None:
        assert self.held is None, "release() the previous step first"
        self.held = step

    def drop(self) -> None:
        self.held = None

    async def settle(self) -> None:
        """After an abort: wait out the sandbox's writes still under way (a step that acted beside
        a failed release queued one), so the next episode on this sandbox does not inherit them.
        A failure here was already reported by the release that aborted, or concerns a step that
        will not be published."""
        if self._flush is not None:
            try:
                await self._flush()
            except Exception:  # noqa: BLE001
                pass

    async def release(self) -> None:
        if self.held is None:
            return
        if self._flush is not None:
            try:
                await self._flush()
            except Exception as exc:  # noqa: BLE001 - the blob store is infrastructure
                self.held = None  # its screenshots are not all stored: it can never be published
                raise _Abort(f"screenshot not stored: {type(exc).__name__}: {exc}", crashed=False) from None
        step, self.held = self.held, None
        self.emit(step)
        self.emitted += 1


async def _label(sandbox: Any, task: TaskSpec, obs: Any, timeout_s: float, dom: Any = None) -> Any:
    """The scripted solver's action on the page as it is now (the screen the policy acts on this
    step; ``dom``: the page's probe already read this step, else it is read here); None when the
    solver would only wait (a game without its board) or the page cannot be read or the solver
    fails on it: the solvers were written for their own states, not every state
    a policy reaches, and a missing label costs one step's imitation, never the episode (a page
    that does not answer within the episode's time left included). A sandbox that crashed does so
    again at the action, which aborts the episode."""
    try:
        if dom is None:
            dom = await asyncio.wait_for(sandbox.query(scripted.DOM_PROBE_JS), timeout_s)
        action = scripted.solve(task.name, obs.observation.instruction, dom)
    except Exception as exc:  # noqa: BLE001 - see above
        log.debug("no expert label for %s: %s: %s", task.name, type(exc).__name__, exc)
        return None
    return None if isinstance(action, Wait) else action


async def _act(sandbox: Any, action: Any, extra_latency_s: float) -> tuple[Any, float]:
    """One environment step -> (its result, its milliseconds, the added latency included)."""
    t0 = time.perf_counter()
    result = await sandbox.step(action)
    if extra_latency_s > 0:
        await asyncio.sleep(extra_latency_s)
    return result, (time.perf_counter() - t0) * 1000


def outcome(reason: str, last: Any) -> tuple[float, bool, float | None, float | None]:
    """(outcome reward, success, score, normalised score) of an episode that ended for ``reason``
    after the step result ``last`` (None: no step). A game is worth its normalised score wherever
    it stopped (0 = the random policy's mean, 1 = the reference's); a task judged only at its end,
    its reward when done, else nothing."""
    if last is not None and last.score is not None:
        return float(last.normalised_score), bool(last.success), float(last.score), float(last.normalised_score)
    if reason == "done":
        return float(last.reward), bool(last.success), None, None
    return 0.0, False, None, None


async def _end(out: _Outbox, eid: str, clock: Callable[[], float], reason: str, last: Any) -> EpisodeResult:
    await out.release()
    reward, success, score, normalised = outcome(reason, last)
    out.emit(EpisodeEnded(episode_id=eid, ts=clock(), num_steps=out.emitted, outcome_reward=reward,
                          success=success, reason=reason, score=score, normalised_score=normalised))
    return EpisodeResult(eid, "ended", reason, out.emitted, reward=reward, success=success)


def _clip(text: str | None, limit: int = 60_000) -> str | None:
    """SDK output as the Step carries it: bounded below the schema's text limit."""
    if text is None or len(text) <= limit:
        return text
    return text[:limit] + f"\n[truncated: {len(text)} characters]"
