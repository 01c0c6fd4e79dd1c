"""The episode loop without Kafka or a browser: a scripted in-memory sandbox and policy."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from producers.episode import run_episode
from producers.policy_client import PolicyClient, PolicyReply, TorchClient
from producers.sandboxes.base import Obs, SandboxCrashed, StepResult
from schemas.actions import Click
from schemas.events import BlobRef, Observation, TaskSpec
from infra.runtime.policy import Decision


def obs(i: int) -> Obs:
    ref = BlobRef(sha256=f"{i:064x}", uri=f"file:///{i}")
    return Obs(Observation(screenshot=ref, screen_width=4, screen_height=4, instruction="do it"),
               np.zeros((4, 4, 3), np.uint8))


class Sandbox:
    """Ends with reward 1 at step ``done_at``; crashes at step ``crash_at``; records flushes."""

    def __init__(self, done_at: int | None = None, crash_at: int | None = None, slow_s: float = 0.0) -> None:
        self.done_at, self.crash_at, self.slow_s = done_at, crash_at, slow_s
        self.n, self.flushes = 0, 0

    async def reset(self, task):
        self.n = 0
        return obs(0)

    async def step(self, action):
        if self.n == self.crash_at:
            raise SandboxCrashed("renderer gone")
        await asyncio.sleep(self.slow_s)
        self.n += 1
        done = self.n - 1 == self.done_at
        return StepResult(obs=obs(self.n), reward=1.0 if done else 0.0, done=done, success=done)

    async def flush(self):
        self.flushes += 1


class Policy(PolicyClient):
    async def act(self, request):
        return PolicyReply(Decision(action=Click(x=0.5, y=0.5), logprob=-2.0, value=0.25), self.version)


def run(sandbox, max_steps=5, timeout_s=60.0, abort=None, client=None):
    events = []
    task = TaskSpec(task_id="t1", suite="miniwob", name="click-test", max_steps=max_steps, timeout_s=timeout_s)
    result = asyncio.run(run_episode(task, sandbox, client or Policy("p"), events.append, sandbox_name="browser",
                                     worker_id="w", abort=abort))
    return result, events


def test_done_episode_events_in_order():
    sandbox = Sandbox(done_at=2)
    result, events = run(sandbox)
    assert [e.kind for e in events] == ["started", "step", "step", "step", "ended"]
    assert [e.step_index for e in events[1:-1]] == [0, 1, 2]
    assert events[-1].reason == "done" and events[-1].success and events[-1].num_steps == 3
    steps = events[1:-1]
    assert [s.next_screenshot_sha256 for s in steps] == [obs(i).observation.screenshot.sha256 for i in (1, 2, 3)]
    assert all(s.logprob == -2.0 and s.value == 0.25 and s.policy == "p" for s in steps)
    assert sandbox.flushes == 3  # every step published only after its screenshots were stored
    assert result.episode_id.startswith("t1:0:") and result.success
    assert events[0].attempt == 0 and events[0].task.task_id == "t1"


class ArgmaxOrSample:
    """An in-process policy for the torch client that records whether it was asked for its argmax."""

    kind, name, version = "pixel", "p", 0

    def __init__(self) -> None:
        self.asked: list[bool] = []

    def act(self, inputs, greedy=False):
        self.asked += [greedy] * len(inputs)
        return [Decision(action=Click(x=0.5, y=0.5), logprob=-1.0, value=0.0) for _ in inputs]


@pytest.mark.parametrize("greedy", [False, True])
def test_a_greedy_workers_steps_are_marked_not_sampled(greedy):
    """``--greedy`` steps still carry the argmax's log-prob; ``sampled`` is what keeps them out of PPO."""
    policy = ArgmaxOrSample()
    _, events = run(Sandbox(done_at=1), client=TorchClient("p", policy=policy, greedy=greedy))
    steps = events[1:-1]
    assert policy.asked == [greedy, greedy]
    assert [s.sampled for s in steps] == [not greedy, not greedy] and all(s.logprob == -1.0 for s in steps)


def test_step_budget_and_timeout():
    result, events = run(Sandbox(), max_steps=3)
    assert events[-1].reason == "step_budget" and events[-1].num_steps == 3 and not result.success
    result, events = run(Sandbox(slow_s=0.2), max_steps=100, timeout_s=0.5)
    assert events[-1].kind == "ended" and events[-1].reason == "timeout"
    assert 1 <= events[-1].num_steps == len(events) - 2 < 100


def test_crash_gives_an_infra_abort_after_the_completed_steps():
    result, events = run(Sandbox(crash_at=2))
    assert [e.kind for e in events] == ["started", "step", "step", "aborted"]
    assert events[-1].infra_failure and "renderer gone" in events[-1].reason and events[-1].num_steps == 2
    assert result.crashed and result.infra_failure


def test_shutdown_aborts_between_steps():
    async def main():
        abort = asyncio.Event()
        abort.set()
        events = []
        task = TaskSpec(task_id="t2", suite="miniwob", name="click-test")
        await run_episode(task, Sandbox(), Policy("p"), events.append, sandbox_name="browser", worker_id="w",
                          abort=abort)
        return events

    events = asyncio.run(main())
    assert [e.kind for e in events] == ["started", "aborted"] and events[-1].infra_failure


def test_step_latency_is_added_to_every_environment_step_and_recorded():
    import time

    from producers.rollout import RolloutConfig
    from infra.runtime.config import ConfigError

    events = []
    task = TaskSpec(task_id="t1", suite="miniwob", name="click-test", max_steps=3, timeout_s=60.0)
    t0 = time.perf_counter()
    result = asyncio.run(run_episode(task, Sandbox(), Policy("p"), events.append, sandbox_name="browser",
                                     worker_id="w", step_latency_s=0.05))
    took = time.perf_counter() - t0
    steps = [e for e in events if getattr(e, "kind", "") == "step"]
    assert result.status == "ended" and len(steps) == 3
    assert took >= 0.15 and all(s.latency_env_ms >= 50 for s in steps)
    try:
        RolloutConfig(step_latency_ms=-1)
    except ConfigError as exc:
        assert "step_latency_ms" in str(exc)
    else:
        raise AssertionError("a negative latency was accepted")


class LoggingSandbox(Sandbox):
    """Steps and screenshot writes that take time, logged as they start and end."""

    def __init__(self, fail_flush_at: int | None = None, **kw) -> None:
        super().__init__(**kw)
        self.log, self.fail_flush_at = [], fail_flush_at

    async def step(self, action):
        self.log.append(f"step {self.n} start")
        result = await super().step(action)
        self.log.append(f"step {self.n - 1} end")
        return result

    async def flush(self):
        self.flushes += 1
        self.log.append(f"write {self.flushes} start")
        await asyncio.sleep(0.02)
        if self.flushes == self.fail_flush_at:
            raise OSError("disk full")
        self.log.append(f"write {self.flushes} end")


def test_the_previous_step_is_stored_and_emitted_while_the_next_one_acts():
    sandbox = LoggingSandbox(done_at=2, slow_s=0.05)
    result, events = run(sandbox)
    assert [e.kind for e in events] == ["started", "step", "step", "step", "ended"]
    assert [e.step_index for e in events[1:-1]] == [0, 1, 2] and result.success
    log = sandbox.log
    # step 0's screenshot is written after step 1 began acting and before it ended
    assert log.index("step 1 start") < log.index("write 1 end") < log.index("step 1 end"), log


def test_a_step_whose_screenshot_was_not_stored_is_never_emitted():
    sandbox = LoggingSandbox(fail_flush_at=2)  # the write that releases step 1
    result, events = run(sandbox, max_steps=5)
    assert [e.kind for e in events] == ["started", "step", "aborted"], [e.kind for e in events]
    assert events[1].step_index == 0
    assert events[-1].num_steps == 1 and "screenshot not stored" in events[-1].reason and "disk full" in events[-1].reason
    assert result.infra_failure and not result.crashed


class DeferredSandbox(Sandbox):
    """Stores screenshots in the background like BrowserSandbox: each step queues a write, flush
    swaps the queue out and waits for it. Writes numbered in ``failing`` fail."""

    def __init__(self, failing=(), **kw) -> None:
        super().__init__(**kw)
        self.failing, self.writes, self._pending = set(failing), 0, []

    async def _write(self, n: int) -> None:
        await asyncio.sleep(0.01)
        if n in self.failing:
            raise OSError(f"disk full (write {n})")

    async def step(self, action):
        result = await super().step(action)
        self.writes += 1
        self._pending.append(asyncio.ensure_future(self._write(self.writes)))
        return result

    async def flush(self):
        pending, self._pending = self._pending, []
        outcomes = await asyncio.gather(*pending, return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome


def test_a_retry_on_the_same_sandbox_does_not_inherit_the_aborted_attempts_writes():
    sandbox = DeferredSandbox(failing={1, 2}, done_at=2)  # the store is down during the first attempt

    async def main():
        task = TaskSpec(task_id="t3", suite="miniwob", name="click-test", max_steps=5)
        outcomes = []
        for attempt in (0, 1):
            events = []
            result = await run_episode(task, sandbox, Policy("p"), events.append, attempt=attempt,
                                       sandbox_name="browser", worker_id="w")
            outcomes.append((result, events))
        return outcomes

    (first, first_events), (second, second_events) = asyncio.run(main())
    assert first.status == "aborted" and "disk full (write 1)" in first.reason and first_events[-1].num_steps == 0
    assert second.status == "ended" and second.success, second.reason
    assert [e.kind for e in second_events] == ["started", "step", "step", "step", "ended"]


def test_environment_latency_is_the_step_alone_not_the_previous_steps_write():
    class SlowWrites(LoggingSandbox):
        async def flush(self):
            self.flushes += 1
            await asyncio.sleep(0.3)

    result, events = run(SlowWrites(done_at=2))
    steps = [e for e in events if e.kind == "step"]
    assert result.success and len(steps) == 3
    assert all(s.latency_env_ms < 150 for s in steps), [s.latency_env_ms for s in steps]


def test_a_bug_in_the_step_is_raised_even_when_the_release_failed_beside_it():
    class Buggy(LoggingSandbox):
        async def step(self, action):
            if self.n == 1:
                raise ValueError("a bug in step")
            return await super().step(action)

    try:
        run(Buggy(fail_flush_at=2))
    except ValueError as exc:
        assert "a bug in step" in str(exc)
    else:
        raise AssertionError("the step's bug was turned into an infrastructure abort")


class ProbedSandbox(Sandbox):
    """A click-test page whose button the DOM probe finds until step ``hide_at`` (then it is gone)."""

    def __init__(self, hide_at: int) -> None:
        super().__init__()
        self.hide_at, self.probes = hide_at, 0

    async def query(self, js):
        self.probes += 1
        button = [] if self.n >= self.hide_at else [{"id": "subbtn", "x": 40, "y": 20, "w": 20, "h": 10}]
        return {"width": 100, "height": 100, "elements": button, "game": None}


class DomReader(Policy):
    """Records the page probes it is handed (a policy that did not ask for them gets none)."""

    def __init__(self, name, needs_dom=False):
        super().__init__(name)
        self.needs_dom, self.doms = needs_dom, []

    async def act(self, request):
        self.doms.append(request.dom)
        return await super().act(request)


@pytest.mark.parametrize("labels", [False, True])
def test_expert_labels_record_the_solvers_action_on_each_screen_and_the_policy_never_sees_the_page(labels):
    sandbox, client = ProbedSandbox(hide_at=2), DomReader("p")
    task = TaskSpec(task_id="t1", suite="miniwob", name="click-test", max_steps=3)
    events = []
    asyncio.run(run_episode(task, sandbox, client, events.append, sandbox_name="browser", worker_id="w",
                            expert_labels=labels))
    steps = [e for e in events if e.kind == "step"]
    assert len(steps) == 3 and client.doms == [None, None, None]
    if labels:
        assert sandbox.probes == 3
        assert [s.expert_action for s in steps] == [Click(x=0.5, y=0.25)] * 2 + [None]  # no button: no label
        assert '"expert_action"' in steps[0].model_dump_json() and '"expert_action"' not in steps[2].model_dump_json()
    else:
        assert sandbox.probes == 0 and all(s.expert_action is None for s in steps)


def test_expert_labels_skip_a_task_without_a_solver_and_a_policy_that_reads_the_page_still_gets_it():
    sandbox, client = ProbedSandbox(hide_at=9), DomReader("p", needs_dom=True)
    events = []
    asyncio.run(run_episode(TaskSpec(task_id="t1", suite="miniwob", name="click-link", max_steps=2), sandbox,
                            client, events.append, sandbox_name="browser", worker_id="w", expert_labels=True))
    assert all(e.expert_action is None for e in events if e.kind == "step")
    assert sandbox.probes == 2 and all(d is not None for d in client.doms)


def test_a_policy_that_reads_the_page_and_the_label_share_one_probe_per_step():
    sandbox, client = ProbedSandbox(hide_at=2), DomReader("p", needs_dom=True)
    events = []
    asyncio.run(run_episode(TaskSpec(task_id="t1", suite="miniwob", name="click-test", max_steps=3), sandbox,
                            client, events.append, sandbox_name="browser", worker_id="w", expert_labels=True))
    assert sandbox.probes == 3 and all(d is not None for d in client.doms)
    assert [e.expert_action for e in events if e.kind == "step"] == [Click(x=0.5, y=0.25)] * 2 + [None]


def test_a_solver_failing_on_the_policys_state_costs_that_steps_label_only(monkeypatch):
    """The solvers were written for their own states; one that raises on a state the policy
    reached (or a page that cannot be read) leaves that step unlabelled and the episode running."""
    from producers import scripted

    real = scripted.solve
    calls = []

    def flaky(name, instruction, dom):
        calls.append(name)
        if len(calls) == 2:
            raise ValueError("invalid literal for int() with base 10: 'Select'")
        return real(name, instruction, dom)

    monkeypatch.setattr(scripted, "solve", flaky)
    sandbox, events = ProbedSandbox(hide_at=9), []
    result = asyncio.run(run_episode(TaskSpec(task_id="t1", suite="miniwob", name="click-test", max_steps=3), sandbox,
                                     Policy("p"), events.append, sandbox_name="browser", worker_id="w",
                                     expert_labels=True))
    assert result.status == "ended" and result.reason == "step_budget"
    assert [e.expert_action is not None for e in events if e.kind == "step"] == [True, False, True]


def test_a_page_that_does_not_answer_the_label_probe_costs_the_label_not_the_time_limit():
    class Hung(ProbedSandbox):
        async def query(self, js):
            await asyncio.sleep(60)

    events = []
    took = asyncio.run(_timed(run_episode(TaskSpec(task_id="t1", suite="miniwob", name="click-test", max_steps=3,
                                                      timeout_s=0.5), Hung(hide_at=9), Policy("p"), events.append,
                                             sandbox_name="browser", worker_id="w", expert_labels=True)))
    assert took < 5.0, "the probe waited past the episode's time limit"
    assert events[-1].kind == "ended" and events[-1].reason == "timeout"
    assert all(e.expert_action is None for e in events if e.kind == "step")


async def _timed(coro) -> float:
    import time as _time

    t0 = _time.monotonic()
    await coro
    return _time.monotonic() - t0
