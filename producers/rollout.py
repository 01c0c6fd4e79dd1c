"""The rollout worker: tasks in, episode events out, N sandboxes at once.

Delivery guarantee: the worker consumes flywheel.tasks.v1 in a consumer group (start more
workers to scale out). Each episode's events (started, step..., ended | aborted) are produced
to flywheel.steps.v1 by the idempotent producer (acks=all) keyed by episode id; a task's offset
is committed only after every event of its episode was acknowledged, and only as part of the
contiguous prefix of finished offsets of its partition (``OffsetTracker``). A task is therefore
run at least once; a re-run after a worker crash is a new execution with a new episode id
(``task_id:attempt:execution``, producers.episode), so its events never mix with the interrupted
run's, which the assembler closes as aborted by infrastructure. A delivery failure stops the worker loudly (non-zero exit, nothing
committed for that task). A malformed task goes to flywheel.dlq.v1; its offset is committed
after the dead letter was acknowledged. On SIGTERM the worker takes no new task, lets in-flight
episodes finish for ``shutdown_grace_s`` and then aborts them, flushes, commits and exits.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

from confluent_kafka import TopicPartition

from infra.runtime.config import ConfigError, opt
from infra.runtime.dlq import dead_letter, send_dead_letter
from infra.runtime.metrics import process_metrics, serve_metrics
from infra.runtime.kafka_clients import (DeliveryError, DeliveryTracker, commit_offsets, commit_offsets_async,
                                         flush_or_raise, make_consumer, make_producer)
from infra.runtime.topics import TOPICS, topic_name
from producers.rollout_metrics import observe
from producers.capacity import machine_sandboxes
from producers.episode import EpisodeResult, run_episode
from producers.offsets import OffsetTracker
from producers.policy_client import PolicyClient, noise_error
from producers.rollout_status import Counters, StatusWriter
from producers.sandboxes.base import SANDBOX_REGISTRY
from producers.tasks import SUITE_SANDBOX, check_task
from schemas.blobs import BlobStore
from schemas.codec import DecodeError, decode, encode
from schemas.events import MAX_TASK_TIMEOUT_S, TaskSpec
from producers.policy_watch import PolicyWatcher
from producers.sandboxes.browser_host import BrowserHost

log = logging.getLogger("flywheel.rollout")
JOIN_GRACE_S = 60.0  # how much longer an idle-exiting worker waits for its first assignment
POLL_MARGIN_S = 300.0  # beyond the longest episode: its last events' acknowledgement, a slow reset


@dataclass
class RolloutConfig:
    sandboxes: int = opt(0, "sandboxes run concurrently by this worker (0: sized to the machine, producers.capacity)")
    policy_backend: str = opt("random", "how the policy is asked", choices=("torch", "http", "random", "scripted"))
    policy_name: str = opt("pixel-miniwob", "policy name: its key on flywheel.policy.v1, followed for hot reload")
    policy_kind: str = opt("pixel", "model kind of a fresh torch policy (before any version is published)")
    policy_config: str = opt("", "JSON model config of a fresh torch policy")
    policy_url: str = opt("http://127.0.0.1:8000", "base URL of the policy server or vLLM (http backend)")
    policy_mode: str = opt("chat", "http API: chat = OpenAI chat completions, act = pixel /v1/act", choices=("chat", "act"))
    greedy: bool = opt(False, "take the most likely action instead of sampling (torch backend)")
    demo_noise: float = opt(0.0, "scripted backend: the chance each step of a game is a mistake (a move drawn from "
                                 "the game's plausible ones) instead of the heuristic's (DART: demonstrations that "
                                 "show recovering; such a step is marked sampled and BC does not imitate it)")
    expert_labels: bool = opt(False, "record on each step of a task with a scripted solver what the solver would have done "
                                     "there (Step.expert_action: DAgger's labels on the policy's own states; the trainer "
                                     "imitates them with --expert-coef)")
    group_id: str = opt("flywheel-rollout", "consumer group shared by all rollout workers")
    worker_id: str = opt("", "this worker's name on its events; empty: rollout-<host>-<pid>")
    step_ms: int = opt(100, "page time the browser's fake clock advances per step (ms)")
    step_latency_ms: int = opt(0, "wall-clock latency added to every environment step (ms): a stand-in for a GUI VM's "
                               "seconds per step, for the asynchronous vs synchronous comparison (0: none)")
    max_attempts: int = opt(2, "runs of a task whose episode an infrastructure failure aborted")
    session_timeout_s: float = opt(45.0, "seconds after which the group hands a crashed worker's "
                                          "uncommitted tasks to another (the broker allows 6 at least)")
    max_tasks: int = opt(0, "stop after taking this many tasks (0: until SIGTERM)")
    idle_exit_s: float = opt(0.0, "stop after this many seconds without a task (0: never)")
    shutdown_grace_s: float = opt(20.0, "on SIGTERM, seconds in-flight episodes may still run before being aborted")
    status_interval_s: float = opt(2.0, "seconds between progress log lines and status file updates")
    reload: bool = opt(True, "follow flywheel.policy.v1 and hot-reload newer versions of the policy")
    ack_timeout_s: float = opt(30.0, "seconds to wait for the broker to acknowledge an episode's events")
    sync_episodes: int = opt(0, "synchronous mode: after this many tasks under one policy version, take no "
                                "more until a newer version is loaded (0: asynchronous)")

    def __post_init__(self) -> None:
        if self.sandboxes == 0:
            self.sandboxes = machine_sandboxes()
        if self.greedy and self.policy_backend != "torch":
            raise ConfigError(f"--greedy takes the torch backend's most likely action; the {self.policy_backend} backend "
                              "would sample anyway (and mark its steps sampled): use --policy-backend torch")
        if problem := noise_error(self.demo_noise):
            raise ConfigError(problem)
        if self.demo_noise and self.policy_backend != "scripted":
            raise ConfigError(f"--demo-noise perturbs the scripted demonstrators; the {self.policy_backend} backend "
                              "has none: use --policy-backend scripted")
        if self.step_latency_ms < 0:
            raise ConfigError(f"step_latency_ms must be >= 0, got {self.step_latency_ms}")


def consumer_overrides(cfg: RolloutConfig) -> dict[str, int | str]:
    """The task consumer's group settings. The feeder polls when a slot frees: with every slot in a
    long episode (a game's limit is up to 1 s a step, any task's at most MAX_TASK_TIMEOUT_S),
    librdkafka's default max.poll.interval.ms of 300 s would evict the worker and its tasks would
    be played again; a dead worker still leaves after the session timeout. Cooperative-sticky
    assignment moves only the partitions that change owner: under the default (eager) protocol a
    worker leaving the group took every partition from the others too, and each played its own
    in-flight tasks again from the last commit (the two-worker test saw a task started twice)."""
    session_ms = int(cfg.session_timeout_s * 1000)
    return {"session.timeout.ms": session_ms, "heartbeat.interval.ms": max(500, session_ms // 4),
            "max.poll.interval.ms": int((MAX_TASK_TIMEOUT_S + POLL_MARGIN_S) * 1000),
            "partition.assignment.strategy": "cooperative-sticky"}


class RolloutWorker:
    def __init__(self, cfg: RolloutConfig, settings: Any, client: PolicyClient, worker_id: str,
                 sandbox_options: dict[str, dict[str, Any]] | None = None) -> None:
        self.cfg, self.settings, self.client, self.worker_id = cfg, settings, client, worker_id
        self.sandbox_options = sandbox_options or {"browser": {"step_ms": cfg.step_ms, "defer_writes": True}}
        self.blobs = BlobStore(settings.blob_root)
        self.tasks_topic = topic_name(TOPICS.tasks, settings)
        self.steps_topic = topic_name(TOPICS.steps, settings)
        self.counters = Counters(policy=client.name)
        self.metrics = process_metrics("rollout")  # on /metrics when settings.metrics_port is set
        self.stop = asyncio.Event()  # no new tasks
        self.abort = asyncio.Event()  # in-flight episodes end now
        self.fatal: BaseException | None = None
        self.offsets = OffsetTracker()
        self._offsets_lock = threading.Lock()
        self._consumer_lock = threading.Lock()
        self._producer: Any = None
        self._consumer: Any = None
        self._poller: threading.Thread | None = None
        self._polling = False
        self._sandboxes: list[Any] = []
        self._assigned_at: float | None = None  # when the group last gave this worker its partitions
        self._started_at = time.monotonic()
        self._settling: set[asyncio.Task] = set()  # episodes waiting for their acks before the commit
        self._shared: dict[str, Any] = {}  # per sandbox kind: what its sandboxes share (one Chromium)
        self.watcher: Any = None

    # ------------------------------------------------------------ lifecycle

    def request_stop(self) -> None:
        """SIGTERM: take no new task; in-flight episodes get ``shutdown_grace_s`` to finish."""
        if not self.stop.is_set():
            log.info("stopping: no new tasks; %d episode(s) in flight", self.counters.in_flight)
            self.stop.set()
            asyncio.get_running_loop().call_later(self.cfg.shutdown_grace_s, self.abort.set)

    async def run(self) -> int:
        serve_metrics(self.settings, self.metrics)
        self._producer = make_producer(self.settings)
        self._polling = True
        self._poller = threading.Thread(target=self._poll_producer, name="rollout-producer-poll", daemon=True)
        self._poller.start()
        self._consumer = make_consumer(self.settings, self.cfg.group_id, **consumer_overrides(self.cfg))
        self._consumer.subscribe([self.tasks_topic], on_assign=self._on_assign, on_revoke=self._on_revoke)
        status = StatusWriter(self.settings, self.worker_id, self.counters, self.cfg.status_interval_s,
                              refresh=self._refresh_counters)
        background: list[asyncio.Task] = [asyncio.create_task(status.run(self.stop))]
        if self.cfg.reload:

            self.watcher = PolicyWatcher(self.settings, self.client, self.blobs, self._producer)
            await self.watcher.catch_up()
            background.append(asyncio.create_task(self.watcher.run(self.stop)))
        self._refresh_counters()
        queue: asyncio.Queue = asyncio.Queue()
        capacity = asyncio.Semaphore(self.cfg.sandboxes)
        slots = [asyncio.create_task(self._slot(i, queue, capacity)) for i in range(self.cfg.sandboxes)]
        try:
            await self._feed(queue, capacity)
        finally:
            for _ in slots:
                queue.put_nowait(None)
            await asyncio.gather(*slots, return_exceptions=True)
            await asyncio.gather(*list(self._settling), return_exceptions=True)
            self.stop.set()
            await self._shutdown(background, status)
        if self.fatal is not None:
            log.error("rollout worker failed: %s", self.fatal)
            return 1
        return 0

    async def _shutdown(self, background: list[asyncio.Task], status: Any) -> None:
        for sb in self._sandboxes:
            try:
                await sb.close()
            except Exception:  # noqa: BLE001
                log.exception("closing a sandbox")
        for shared in self._shared.values():
            await shared.close()
        await asyncio.gather(*background, return_exceptions=True)
        if self.watcher is not None:
            self.watcher.close()
        try:
            await asyncio.to_thread(flush_or_raise, self._producer, None, 30.0)
        except DeliveryError as exc:
            self.fatal = self.fatal or exc
        self._polling = False
        with self._consumer_lock:
            self._final_commit()
            self._consumer.close()
        await self.client.close()
        status.write(final=True)

    def _poll_producer(self) -> None:
        while self._polling:
            self._producer.poll(0.05)

    def _idle_s(self, last_task: float) -> tuple[float, float]:
        """-> (seconds without a task, the limit for stopping; 0: never). Idle time counts from the
        latest rebalance; before the group's first assignment (a fresh broker's coordinator can take
        several seconds to load), from the start, with JOIN_GRACE_S more to wait."""
        if not self.cfg.idle_exit_s:
            return 0.0, 0.0
        if self._assigned_at is None:
            return time.monotonic() - self._started_at, self.cfg.idle_exit_s + JOIN_GRACE_S
        return time.monotonic() - max(last_task, self._assigned_at), self.cfg.idle_exit_s

    def _on_assign(self, consumer: Any, partitions: list) -> None:
        self._assigned_at = time.monotonic()  # idle time counts from the latest rebalance

    def _on_revoke(self, consumer: Any, partitions: list) -> None:  # only those leaving (cooperative)
        with self._offsets_lock:
            for tp in partitions:
                self.offsets.forget(tp.topic, tp.partition)

    # ------------------------------------------------------------ tasks in

    def _poll_task(self) -> Any:
        with self._consumer_lock:
            return self._consumer.poll(0.2)

    async def _wait_for_newer_policy(self, version: int) -> None:
        """Sync mode: the batch under ``version`` is out; rollout pauses until training published
        and this worker loaded the next version (so rollout and training never overlap)."""
        t0 = time.monotonic()
        while not self.stop.is_set() and self.client.version <= version:
            await asyncio.sleep(0.1)
        self.counters.sync_wait_s += time.monotonic() - t0

    async def _feed(self, queue: asyncio.Queue, capacity: asyncio.Semaphore) -> None:
        taken, last_task = 0, time.monotonic()
        batch_version, batch_taken = self.client.version, 0
        while not self.stop.is_set():
            if self.cfg.sync_episodes and batch_taken >= self.cfg.sync_episodes:
                await self._wait_for_newer_policy(batch_version)
                batch_version, batch_taken = self.client.version, 0
                continue
            await capacity.acquire()
            msg = None
            while msg is None and not self.stop.is_set():
                msg = await asyncio.to_thread(self._poll_task)
                if msg is not None and msg.error():
                    log.warning("tasks topic: %s", msg.error())
                    msg = None
                idle, limit = self._idle_s(last_task)
                if msg is None and limit and idle > limit and self.counters.in_flight == 0:
                    log.info("no task for %.0fs: stopping", idle)
                    self.stop.set()
            if msg is None:
                capacity.release()
                break
            last_task = time.monotonic()
            with self._offsets_lock:
                self.offsets.taken(msg.topic(), msg.partition(), msg.offset())
            task = await self._decode_task(msg)
            if task is None:
                capacity.release()
            else:
                self.counters.in_flight += 1
                batch_taken += 1
                queue.put_nowait((msg, task))
            taken += 1
            if self.cfg.max_tasks and taken >= self.cfg.max_tasks:
                log.info("took %d tasks: stopping after the in-flight ones", taken)
                self.stop.set()

    async def _decode_task(self, msg: Any) -> TaskSpec | None:
        """A valid, runnable task; or None after its dead letter was acknowledged and committed."""
        try:
            task = decode(msg.value(), TaskSpec)
            check_task(task)
            return task
        except (DecodeError, ValueError) as exc:
            self.counters.dead_letters += 1
            tracker = DeliveryTracker()
            letter = dead_letter("rollout", exc, msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value())
            send_dead_letter(self._producer, self.settings, letter, msg.key(), on_delivery=tracker)
            if await self._acked(tracker, 1):
                await self._finished(msg)
            return None

    # ------------------------------------------------------------ episodes

    async def _slot(self, index: int, queue: asyncio.Queue, capacity: asyncio.Semaphore) -> None:
        sandboxes: dict[str, Any] = {}
        while True:
            item = await queue.get()
            if item is None:
                return
            msg, task = item
            try:
                await self._run_task(index, sandboxes, msg, task)
            except Exception as exc:  # noqa: BLE001 - a worker bug or delivery failure: stop loudly
                log.exception("slot %d failed on task %s", index, task.task_id)
                self.fatal = self.fatal or exc
                self.stop.set()
                self.abort.set()
            finally:
                self.counters.in_flight -= 1
                capacity.release()

    async def _sandbox(self, sandboxes: dict[str, Any], kind: str) -> Any:
        if kind not in sandboxes:
            if kind not in SANDBOX_REGISTRY:  # importing the module registers it
                importlib.import_module(f"producers.sandboxes.{kind}")
            options = dict(self.sandbox_options.get(kind, {}))
            if kind == "browser":  # this worker's sandboxes are pages of one Chromium

                if "browser" not in self._shared:
                    self._shared["browser"] = BrowserHost(options.pop("executable", ""))
                options["host"] = self._shared["browser"]
            sb = SANDBOX_REGISTRY[kind](self.blobs, **options)
            await sb.start()
            sandboxes[kind] = sb
            self._sandboxes.append(sb)
        return sandboxes[kind]

    async def _restart(self, sandboxes: dict[str, Any], kind: str) -> None:
        sb = sandboxes.get(kind)
        self.counters.sandbox_restarts += 1
        if sb is not None and hasattr(sb, "restart"):
            await sb.restart()
            return
        sandboxes.pop(kind, None)
        if sb is not None:
            self._sandboxes.remove(sb)
            try:
                await sb.close()
            except Exception:  # noqa: BLE001
                log.exception("closing a crashed %s sandbox", kind)

    async def _run_task(self, index: int, sandboxes: dict[str, Any], msg: Any, task: TaskSpec) -> None:
        kind = SUITE_SANDBOX[task.suite]
        runs: list[tuple[str, DeliveryTracker, int]] = []
        for attempt in range(self.cfg.max_attempts):
            sandbox = await self._sandbox(sandboxes, kind)
            tracker, produced = DeliveryTracker(), [0]

            def emit(event: Any) -> None:
                self._produce(event, tracker)
                produced[0] += 1
                observe(self.metrics, event, task.name)

            result = await run_episode(task, sandbox, self.client, emit, attempt=attempt, sandbox_name=kind,
                                       worker_id=self.worker_id, abort=self.abort,
                                       step_latency_s=self.cfg.step_latency_ms / 1000,
                                       expert_labels=self.cfg.expert_labels)
            runs.append((result.episode_id, tracker, produced[0]))
            self._count(result)
            if result.crashed:
                await self._restart(sandboxes, kind)
            if not result.infra_failure or self.stop.is_set() or self.abort.is_set():
                break
        # The slot moves on; the task's offset is committed once the broker acknowledged its events.
        settle = asyncio.create_task(self._settle(msg, runs))
        self._settling.add(settle)
        settle.add_done_callback(self._settling.discard)

    async def _settle(self, msg: Any, runs: list[tuple[str, DeliveryTracker, int]]) -> None:
        try:
            for eid, tracker, expected in runs:
                if not await self._acked(tracker, expected):
                    raise DeliveryError(f"episode {eid}: {expected} events not acknowledged "
                                        f"within {self.cfg.ack_timeout_s:.0f}s")
            await self._finished(msg)
        except Exception as exc:  # noqa: BLE001 - a lost event must stop the worker, loudly
            log.error("not committing task at %s[%d]@%d: %s", msg.topic(), msg.partition(), msg.offset(), exc)
            self.fatal = self.fatal or exc
            self.stop.set()
            self.abort.set()

    def _produce(self, event: Any, tracker: DeliveryTracker) -> None:
        value, key = encode(event), event.episode_id.encode()
        while True:
            try:
                self._producer.produce(self.steps_topic, key=key, value=value, on_delivery=tracker)
                return
            except BufferError:  # local queue full: the poller thread drains it
                threading.Event().wait(0.01)

    async def _acked(self, tracker: DeliveryTracker, expected: int) -> bool:
        """Wait for ``expected`` acknowledgements; raise on a failure, False on timeout."""
        loop = asyncio.get_running_loop()
        end = loop.time() + self.cfg.ack_timeout_s
        while tracker.acked + len(tracker.failures) < expected:
            if loop.time() > end:
                return False
            await asyncio.sleep(0.005)
        tracker.raise_if_failed()
        return True

    async def _finished(self, msg: Any) -> None:
        with self._offsets_lock:
            commit = self.offsets.finished(msg.topic(), msg.partition(), msg.offset())
        if commit is None:
            return
        tp = TopicPartition(msg.topic(), msg.partition(), commit)
        # librdkafka is thread-safe: the commit need not wait for the feeder's poll to return. A
        # moving coordinator is waited out until the in-flight episodes are aborted; a commit point
        # lost otherwise is covered by the partition's next one, or by _final_commit
        try:
            await commit_offsets_async(self._consumer, [tp], self.abort)
        except Exception as exc:  # noqa: BLE001 - e.g. the partition moved to another worker
            log.warning("commit of %s[%d]@%d failed: %s", tp.topic, tp.partition, tp.offset, exc)

    def _final_commit(self) -> None:
        """Re-commit every commit point of the partitions still owned (one may have been lost)."""
        with self._offsets_lock:
            positions = self.offsets.positions()
        owned = {(tp.topic, tp.partition) for tp in self._consumer.assignment()}
        tps = [TopicPartition(t, p, o) for t, p, o in positions if (t, p) in owned]
        if tps:
            try:
                commit_offsets(self._consumer, tps, timeout_s=10.0)  # shutting down: wait a moving coordinator out briefly
            except Exception as exc:  # noqa: BLE001
                log.warning("final commit failed: %s", exc)

    def _refresh_counters(self) -> None:
        self.counters.policy_version = self.client.version
        self.counters.reloads = self.watcher.reloads if self.watcher is not None else 0

    def _count(self, result: EpisodeResult) -> None:
        c = self.counters
        c.episodes += 1
        c.steps += result.num_steps
        self._refresh_counters()
        if result.status == "ended":
            c.ended += 1
            c.successes += int(result.success)
            c.reward_sum += result.reward
        else:
            c.aborted += 1
            c.infra_failures += int(result.infra_failure)


def default_worker_id() -> str:
    import os
    import socket

    return f"rollout-{socket.gethostname()}-{os.getpid()}"

