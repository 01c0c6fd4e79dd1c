"""A rollout worker SIGKILLed mid-episode: its task is re-run as a new execution, never mixed.

``flywheel rollout`` runs as a subprocess (random policy, so two executions of one task click
differently and a mix would show) on multi-step click-button-sequence tasks. The test watches
flywheel.steps.v1, SIGKILLs the worker while an episode is half published, starts a second
worker in the same group, and then counts from the topic:

- the interrupted execution's task was run again under a new episode id, with the same task id
  and attempt on its started event (what links the two);
- no (episode_id, step_index) slot carries two contents and no episode is closed twice;
- every task has an ended episode; every closed episode is started, steps 0..n-1, closed.

The interrupted partial stays open on the topic: closing it as aborted by infrastructure is the
streams assembler's abandoned-episode timer (not running here).

Bounded: about a minute (two worker start-ups, a group session timeout of 8 s).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections import defaultdict

import pytest

from tests.e2e.browser_support import require_chromium

pytestmark = pytest.mark.e2e

TASKS = 6
MAX_STEPS = 8
KILLS_TRIED = 3


class StepsWatch:
    """Every event of flywheel.steps.v1 so far, read by one consumer that stays open."""

    def __init__(self, settings) -> None:
        from infra.runtime.kafka_clients import make_consumer
        from infra.runtime.topics import TOPICS, topic_name

        self.consumer = make_consumer(settings, f"watch-{time.time_ns()}")
        self.consumer.subscribe([topic_name(TOPICS.steps, settings)])
        self.events: list = []

    def poll(self, seconds: float) -> list:
        from schemas.codec import decode
        from schemas.events import EpisodeEvent

        end = time.monotonic() + seconds
        while time.monotonic() < end:
            msg = self.consumer.poll(0.1)
            if msg is not None and not msg.error():
                event = decode(msg.value(), EpisodeEvent)
                assert msg.key().decode() == event.episode_id
                self.events.append(event)
        return self.events

    def open_with_steps(self) -> set[str]:
        """Episodes with a step published and no close yet."""
        stepped = {e.episode_id for e in self.events if e.kind == "step"}
        closed = {e.episode_id for e in self.events if e.kind in ("ended", "aborted")}
        return stepped - closed

    def close(self) -> None:
        self.consumer.close()


def _worker(settings, group_id: str, name: str, log_dir) -> subprocess.Popen:
    from app.demo_children import child_env
    from infra.runtime.procs import flywheel_argv

    argv = flywheel_argv("rollout", "--sandboxes", "1", "--policy-backend", "random", "--group-id", group_id,
                         "--worker-id", name, "--no-reload", "--session-timeout-s", "8", "--status-interval-s", "1")
    log = open(log_dir / f"{name}.log", "ab")
    try:
        return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env={**os.environ, **child_env(settings, settings.topic_prefix)},
                                start_new_session=True)
    finally:
        log.close()


def _ended_tasks(events) -> set[str]:
    task_of = {e.episode_id: e.task.task_id for e in events if e.kind == "started"}
    return {task_of[e.episode_id] for e in events if e.kind == "ended" and e.episode_id in task_of}


def _kill(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGKILL)  # the worker and its Chromium, as a crashed pod would go
    proc.wait(30)


def _tail(log_dir, name: str) -> str:
    return (log_dir / f"{name}.log").read_text(errors="replace")[-2000:]


def test_a_sigkilled_rollout_reruns_the_task_under_a_new_episode_id_and_mixes_nothing(settings, group_id, tmp_path):
    require_chromium()
    from producers.tasks import submit
    from schemas.events import TaskSpec

    tasks = [TaskSpec(task_id=f"crash.{i}", suite="miniwob", name="click-button-sequence", seed=i,
                      max_steps=MAX_STEPS) for i in range(TASKS)]
    assert submit(settings, tasks) == TASKS
    watch, procs = StepsWatch(settings), []
    try:
        # SIGKILL a worker while one of its episodes is half published; a close that lands between
        # seeing the episode open and the kill leaves nothing interrupted, so try again
        interrupted: set[str] = set()
        for k in range(KILLS_TRIED):
            procs.append(_worker(settings, group_id, f"w-killed-{k}", tmp_path))
            deadline = time.monotonic() + 120
            while not watch.open_with_steps() and time.monotonic() < deadline:
                assert procs[-1].poll() is None, _tail(tmp_path, f"w-killed-{k}")
                watch.poll(0.2)
            assert watch.open_with_steps(), f"no episode in flight: {_tail(tmp_path, f'w-killed-{k}')}"
            _kill(procs[-1])
            watch.poll(2.0)  # whatever the broker acknowledged before the kill
            interrupted = watch.open_with_steps()
            if interrupted:
                break
        assert interrupted, f"{KILLS_TRIED} kills all landed between episodes"

        procs.append(_worker(settings, group_id, "w-rerun", tmp_path))
        deadline = time.monotonic() + 180
        while len(_ended_tasks(watch.poll(0.5))) < TASKS and time.monotonic() < deadline:
            assert procs[-1].poll() is None, _tail(tmp_path, "w-rerun")
        assert len(_ended_tasks(watch.events)) == TASKS, f"tasks not ended: {_tail(tmp_path, 'w-rerun')}"
        procs[-1].send_signal(signal.SIGTERM)
        assert procs[-1].wait(60) == 0, _tail(tmp_path, "w-rerun")
        events = watch.poll(1.0)  # anything still on its way (a duplicate would show here)
    finally:
        for proc in procs:
            if proc.poll() is None:
                _kill(proc)
        watch.close()

    started = {e.episode_id: e for e in events if e.kind == "started"}
    slots: dict[tuple[str, int], set] = defaultdict(set)
    closes: dict[str, list] = defaultdict(list)
    steps: dict[str, list[int]] = defaultdict(list)
    for e in events:
        assert e.episode_id in started, f"{e.kind} of {e.episode_id} with no started event"
        if e.kind == "step":
            slots[(e.episode_id, e.step_index)].add(
                (e.action.model_dump_json() if e.action else None, e.observation.screenshot.sha256, e.logprob))
            steps[e.episode_id].append(e.step_index)
        elif e.kind in ("ended", "aborted"):
            closes[e.episode_id].append(e)
    mixed = {slot: contents for slot, contents in slots.items() if len(contents) > 1}
    assert not mixed, f"(episode, step) slots with two contents: {mixed}"
    assert all(len(c) == 1 for c in closes.values()), "an episode was closed twice"
    for eid, (close,) in closes.items():  # a closed execution is complete and its own
        assert steps[eid] == list(range(close.num_steps)), (eid, steps[eid], close.num_steps)

    by_task: dict[str, list[str]] = defaultdict(list)
    for eid, s in started.items():
        by_task[s.task.task_id].append(eid)
    assert set(by_task) == {t.task_id for t in tasks}
    for eid in interrupted:
        task_id = started[eid].task.task_id
        reruns = [r for r in by_task[task_id] if r != eid and r in closes and closes[r][0].kind == "ended"]
        assert reruns, f"the interrupted {eid} was not re-run"
        assert all(started[r].attempt == started[eid].attempt == 0 for r in reruns)  # the worker's own retry count
        assert all(r.startswith(f"{task_id}:0:") and eid.startswith(f"{task_id}:0:") for r in reruns)
        assert started[eid].worker_id.startswith("w-killed-")
        assert closes.get(eid) is None  # left open: the assembler's abandoned timer closes it as aborted
    reruns_after_commit = sum(1 for ids in by_task.values() if len(ids) > 1) - len(interrupted)
    print(f"crash re-run: {len(tasks)} tasks, {len(started)} executions started, {len(interrupted)} interrupted "
          f"mid-episode ({sum(len(steps[e]) for e in interrupted)} steps published) and re-run under new ids, "
          f"{reruns_after_commit} finished but uncommitted task(s) re-run, {len(slots)} (episode, step) slots, "
          f"0 mixed, {len(closes)} episodes closed once each")
