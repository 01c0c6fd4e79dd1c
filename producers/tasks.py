"""Task specs: validation, building them from a suite + names (or a named task suite,
producers.suites) or a JSONL file, and submission.

Delivery: every TaskSpec is produced with the idempotent producer (acks=all), keyed by task_id,
and ``submit`` returns only after the broker acknowledged all of them (it raises otherwise).
Everything is validated before the first record is produced, so a bad line submits nothing.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Iterable

import orjson

from infra.runtime.errors import UserError
from infra.runtime.kafka_clients import DeliveryTracker, flush_or_raise, make_producer
from producers.games import GAMES
from producers.suites import expand, family
from infra.runtime.topics import TOPICS, topic_name
from schemas.codec import DecodeError, encode, validate
from schemas.events import MAX_TASK_TIMEOUT_S, TaskSpec
from producers.sandboxes.miniwob_server import task_names
from producers.sandboxes.desktop_tasks import DESKTOP_TASKS

SUITE_SANDBOX = {"miniwob": "browser", "desktop": "desktop", "games": "browser"}


def known_tasks(suite: str) -> tuple[str, ...]:
    if suite == "miniwob":

        return task_names()
    if suite == "desktop":

        return tuple(sorted(DESKTOP_TASKS))
    if suite == "games":
        return tuple(sorted(GAMES))
    return ()


def check_task(task: TaskSpec) -> None:
    """Raise ValueError unless a sandbox of this build can run ``task``."""
    names = known_tasks(task.suite)
    if task.name not in names:
        raise ValueError(f"unknown {task.suite} task {task.name!r} ({len(names)} known)")
    explore_share(task)
    explore_points(task)


EXPLORE = "explore"  # the task param: the share of uniform clicks the policy mixes into this episode's


def explore_share(task: TaskSpec) -> float:
    """The exploration floor the curriculum asked of this episode (app.curriculum.exploring): a
    share 0 <= e < 1 of uniform clicks mixed into the policy's click locations; 0 when unset.
    Raises ValueError for anything else (the rollout dead-letters the task)."""
    e = task.params.get(EXPLORE, 0.0)
    if isinstance(e, bool) or not isinstance(e, (int, float)) or not 0.0 <= e < 1.0:  # NaN fails the range
        raise ValueError(f"task param {EXPLORE!r} must be a number in [0, 1), got {e!r}")
    return float(e)


EXPLORE_AT = "explore_at"  # the task param: where demonstrations clicked, [[step, x, y], ...] (app.curriculum.guide_points)
MAX_EXPLORE_POINTS = 256  # a task's guide at most: its params travel in every task record


def explore_points(task: TaskSpec) -> list[tuple[int, float, float]]:
    """The guided exploration floor's points (app.curriculum.guide_points): where demonstrations
    of this task clicked, each ``[step, x, y]`` (the step's index; x, y the screen's fractions, as
    actions give them); the floor's share
    is then drawn near them instead of uniformly; [] when unset. Raises ValueError for anything
    else (the rollout dead-letters the task)."""
    raw = task.params.get(EXPLORE_AT, [])
    if not isinstance(raw, list) or len(raw) > MAX_EXPLORE_POINTS:
        raise ValueError(f"task param {EXPLORE_AT!r} must be a list of at most {MAX_EXPLORE_POINTS} "
                         f"[step, x, y] points, got {type(raw).__name__}"
                         f"{f' of {len(raw)}' if isinstance(raw, list) else ''}")
    out = []
    for point in raw:
        ok = isinstance(point, list) and len(point) == 3 and not any(isinstance(v, bool) for v in point)
        if ok:
            step, x, y = point
            ok = isinstance(step, int) and 0 <= step < 10_000 and all(
                isinstance(v, (int, float)) and 0.0 <= v <= 1.0 for v in (x, y))  # NaN fails the range
        if not ok:
            raise ValueError(f"task param {EXPLORE_AT!r}: each point must be [step, x, y] with 0 <= step "
                             f"< 10000 and 0 <= x, y <= 1 (the screen's fractions), got {point!r}")
        out.append((int(step), float(x), float(y)))
    return out


MIN_TIMEOUT_S = 60.0  # an episode's wall-clock limit, at least
STEP_ALLOWANCE_S = 1.0  # and this much per step of its budget: the main job steps each sandbox every ~0.35 s


def episode_timeout_s(max_steps: int) -> float:
    """The default wall-clock limit of an episode of ``max_steps`` steps: 60 s, or 1 s per step
    where that is longer (at most the schema's MAX_TASK_TIMEOUT_S, 3600). A flat 60 s cut the games' long episodes by
    the clock, not by their step limit: the main job runs a sandbox's step every ~0.35 s on 2
    cores (11.3 steps/s over 4 sandboxes, docs/performance.md), so a 200-step 2048 episode needs
    ~70 s and a 300-step snake ~105 s; their scores then depended on the machine's load."""
    return min(max(MIN_TIMEOUT_S, STEP_ALLOWANCE_S * max_steps), MAX_TASK_TIMEOUT_S)


def build_tasks(suite: str, names: list[str], episodes: int, seed: int = 0, *, max_steps: int = 10,
                timeout_s: float | None = None, prefix: str = "", params: dict | None = None) -> list[TaskSpec]:
    """K episodes per task name; episode k of task n gets seed ``seed + k`` and a unique task_id.
    Tasks are interleaved (k-th episode of every task before the (k+1)-th) so a worker that
    consumes them in order sees every task from the start. A registered suite's name stands for
    its tasks, each built with its suite's family (``--tasks games`` builds games tasks).
    ``timeout_s`` None: ``episode_timeout_s(max_steps)``."""
    if episodes < 1:
        raise UserError(f"--episodes must be >= 1, got {episodes}")
    if not names:
        raise UserError("no task names given (--tasks click-test,click-test-2, or a suite: --tasks quick)")
    if suite in ("miniwob", "games"):  # the browser's families: a registered suite name stands for its tasks
        names = expand(names)
    run = prefix or f"r{int(time.time() * 1000):x}"
    timeout_s = episode_timeout_s(max_steps) if timeout_s is None else timeout_s
    out = []
    for k in range(episodes):
        for name in names:
            try:
                task = TaskSpec(task_id=f"{run}.{name}.{seed + k}", suite=family(name, suite), name=name,
                                seed=seed + k, max_steps=max_steps, timeout_s=timeout_s, submitted_at=time.time(),
                                params=dict(params or {}))
                check_task(task)
            except (ValueError, DecodeError) as exc:  # pydantic's ValidationError is a ValueError
                raise UserError(f"task {name!r}: {exc}") from None
            out.append(task)
    return out


def read_jsonl(lines: Iterable[str], source: str = "<tasks>") -> list[TaskSpec]:
    """Parse and validate every line first; the first bad one raises naming its line number."""
    out = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            obj: Any = orjson.loads(line)
            if isinstance(obj, dict):
                obj.setdefault("submitted_at", time.time())
            task = validate(obj, TaskSpec)
            check_task(task)
        except orjson.JSONDecodeError as exc:
            raise UserError(f"{source}:{number}: not valid JSON: {exc}") from None
        except (DecodeError, ValueError) as exc:
            raise UserError(f"{source}:{number}: {exc}") from None
        out.append(task)
    return out


def read_jsonl_file(path: str) -> list[TaskSpec]:
    p = Path(path)
    if not p.is_file():
        raise UserError(f"task file {path} not found")
    with p.open(encoding="utf-8", errors="strict") as f:
        try:
            return read_jsonl(f, str(path))
        except UnicodeDecodeError as exc:
            raise UserError(f"{path}: not UTF-8: {exc}") from None


def submit(settings: Any, tasks: list[TaskSpec], timeout_s: float = 30.0) -> int:
    """Produce ``tasks`` keyed by task_id and wait for every acknowledgement; returns the count."""
    producer = make_producer(settings)
    tracker = DeliveryTracker()
    topic = topic_name(TOPICS.tasks, settings)
    for task in tasks:
        while True:
            try:
                producer.produce(topic, key=task.task_id.encode(), value=encode(task), on_delivery=tracker)
                break
            except BufferError:  # local queue full: let deliveries drain
                producer.poll(0.1)
        producer.poll(0)
    flush_or_raise(producer, tracker, timeout_s)
    return tracker.acked
