"""Corrections from the Episodes view: a person marks a failed episode's first wrong step and
gives the right action; it becomes an error-correction pair on flywheel.pairs.v1 (annotator
``human:<name>``), built by producers.reflection like the automatic annotator's.

``POST /api/corrections`` {episode, tau, action: {type, x, y | text | key | direction}, thought,
name}. The pair needs the episode exactly as the policy saw it (observation, history, task and
seed), which ClickHouse does not keep whole: the trajectory is read back from
flywheel.trajectories.v1, from shortly before the time ClickHouse says it ended (offsets for
times, every partition), so the read is short however long the topic is.

Delivery: the answer comes after the broker acknowledged the pair (acks=all). A pair's id is
(episode, kind, annotator): a person correcting the same episode again replaces their pair.
"""

from __future__ import annotations

import asyncio
import functools
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

from aiohttp import web
from confluent_kafka import TopicPartition

from app.ui.annotate import json_body
from app.ui.annotate_input import body_dict, int_field, parse_action, parse_name, text_field
from app.ui.queries import UiInputError, checked_id
from infra.runtime.kafka_clients import DeliveryTracker, flush_or_raise, make_consumer, make_producer
from infra.runtime.settings import Settings
from infra.runtime.topics import TOPICS, topic_name
from producers import scripted
from producers.reflection import error_correction_pair
from schemas.codec import decode, encode
from schemas.events import PreferencePair, Trajectory

LOOKBACK_S = 120.0  # the trajectory is produced after its episode ended: read from a little before
ENDED_SQL = ("SELECT toUnixTimestamp64Milli(ended_at) AS ended_ms, toUnixTimestamp64Milli(ingested_at) AS ingested_ms, "
             "success FROM trajectories FINAL "
             "WHERE episode_id = {episode_id:String} LIMIT 1")


def find_trajectory(settings: Settings, episode_id: str, ended_ms: int, until_ms: int | None = None,
                    timeout_s: float = 20.0) -> Trajectory | None:
    """The trajectory ``episode_id`` from flywheel.trajectories.v1, reading every partition from
    ``LOOKBACK_S`` before ``ended_ms`` to its end or its first record after ``until_ms`` (the sink
    ingested the trajectory before then: an old episode's read does not run through every record
    since), with a throw-away group that never commits."""
    topic = topic_name(TOPICS.trajectories, settings)
    consumer = make_consumer(settings, f"flywheel-ui-{uuid.uuid4().hex[:12]}", **{"enable.auto.commit": False})
    key, found = episode_id.encode(), None
    try:
        parts = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        since = max(ended_ms - int(LOOKBACK_S * 1000), 0)
        starts = consumer.offsets_for_times([TopicPartition(topic, p, since) for p in parts], timeout=10)
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in parts}
        todo = [tp for tp in starts if tp.offset >= 0 and tp.offset < ends[tp.partition]]
        consumer.assign(todo)
        left, deadline = {tp.partition for tp in todo}, time.monotonic() + timeout_s
        while left and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            if msg.key() == key:
                found = decode(msg.value(), Trajectory)  # the last copy wins (a re-assembled episode)
            if msg.offset() + 1 >= ends[msg.partition()] or (until_ms is not None and msg.timestamp()[1] > until_ms):
                left.discard(msg.partition())
    finally:
        consumer.close()
    return found


def correction_pair(traj: Trajectory, body: dict, annotator: str, now: float) -> PreferencePair:
    """The error-correction pair a person's correction of ``traj`` gives; UiInputError naming the
    field when the episode cannot be corrected or the correction is not an action on its screen."""
    if traj.success:
        raise UiInputError(f"episode: {traj.episode_id} succeeded; corrections are for failed episodes")
    if not traj.steps:
        raise UiInputError(f"episode: {traj.episode_id} has no steps to correct")
    tau = int_field(body, "tau", 0, len(traj.steps) - 1)
    if [s.step_index for s in traj.steps[:tau + 1]] != list(range(tau + 1)):
        raise UiInputError(f"tau: the episode's steps before {tau} are not all recorded (missing {traj.missing_steps})")
    screen = traj.steps[tau].observation
    action, _ = parse_action(body.get("action"), screen.screen_width, screen.screen_height)
    if same_action(action, traj.steps[tau].action, screen.screen_width, screen.screen_height):
        raise UiInputError(f"action: the same as step {tau}'s; a correction gives a different action")
    thought = text_field(body, "thought", 2000) or scripted.thought(action)
    return error_correction_pair(traj, tau, action, annotator, now, thought)


def same_action(a, b, width: int, height: int) -> bool:
    """Whether ``a`` and ``b`` are one action on a ``width`` x ``height`` screen (positions within a pixel)."""
    if b is None or a.type != b.type:
        return False
    da, db = a.model_dump(), b.model_dump()
    scale = {"x": width, "x1": width, "x2": width, "y": height, "y1": height, "y2": height}
    return da.keys() == db.keys() and all(
        abs(da[k] - db[k]) * scale[k] <= 1 if k in scale else da[k] == db[k] for k in da)


def publish_pair(settings: Settings, pair: PreferencePair) -> None:
    """Produce ``pair`` to flywheel.pairs.v1 keyed by episode id; return once acknowledged."""
    producer, tracker = make_producer(settings), DeliveryTracker()
    producer.produce(topic_name(TOPICS.pairs, settings), key=pair.episode_id.encode(), value=encode(pair),
                     on_delivery=tracker)
    flush_or_raise(producer, tracker)


SETTINGS_KEY = web.AppKey("corrections_settings", Settings)
READ_KEY = web.AppKey("corrections_read", object)  # (settings, sql, params) -> rows: the server's checked reader
POOL_KEY = web.AppKey("corrections_pool", ThreadPoolExecutor)
AT_ONCE = 2  # corrections reading or publishing at a time: a slow one (up to ~40 s) must not take the views' threads


async def correct(request: web.Request) -> web.Response:
    settings, run_sql, pool = request.app[SETTINGS_KEY], request.app[READ_KEY], request.app[POOL_KEY]
    body = body_dict(await json_body(request))
    episode_id = checked_id("episode", body.get("episode") if isinstance(body.get("episode"), str) else "")
    annotator = parse_name(body)
    rows = await _io(pool, "reading ClickHouse", run_sql, settings, ENDED_SQL, {"episode_id": episode_id})
    if not rows:
        raise web.HTTPNotFound(text=f"flywheel ui: no episode {episode_id!r} in ClickHouse\n")
    if rows[0]["success"]:
        raise UiInputError(f"episode: {episode_id} succeeded; corrections are for failed episodes")
    traj = await _io(pool, f"reading {TOPICS.trajectories.name}", find_trajectory, settings, episode_id,
                     int(rows[0]["ended_ms"]), int(rows[0]["ingested_ms"]) + int(LOOKBACK_S * 1000))
    if traj is None:
        raise web.HTTPNotFound(text=f"flywheel ui: episode {episode_id!r} is not on {TOPICS.trajectories.name} "
                                    "(past its retention?)\n")
    pair = correction_pair(traj, body, annotator, time.time())
    await _io(pool, f"publishing to {TOPICS.pairs.name}", publish_pair, settings, pair)
    return web.json_response({"pair": pair.event_id, "tau": pair.tau, "chosen": pair.chosen.action.model_dump(),
                              "rejected": pair.rejected.action.model_dump() if pair.rejected.action else None})


async def _io(pool: ThreadPoolExecutor, doing: str, fn, *args):
    """``fn(*args)`` in one of the corrections' own threads (``pool``); a failure of ClickHouse or
    the broker is a 502 saying which (a refused input stays a 400)."""
    try:
        return await asyncio.get_running_loop().run_in_executor(pool, functools.partial(fn, *args))
    except UiInputError:
        raise
    except Exception as exc:  # noqa: BLE001 - the person gets one line; the pair was not saved
        line = str(exc).splitlines()[0][:300] if str(exc) else ""
        raise web.HTTPBadGateway(text=f"flywheel ui: correction not saved: {doing} failed: "
                                      f"{type(exc).__name__}: {line}\n") from None


def add_routes(app: web.Application, settings: Settings, read) -> None:
    """``read``: the server's policy-checked SQL reader (server.run_sql)."""
    app[SETTINGS_KEY], app[READ_KEY] = settings, read
    app[POOL_KEY] = ThreadPoolExecutor(AT_ONCE, thread_name_prefix="ui-corrections")
    app.on_cleanup.append(_stop_pool)
    app.router.add_post("/api/corrections", correct)


async def _stop_pool(app: web.Application) -> None:
    app[POOL_KEY].shutdown(wait=False, cancel_futures=True)
