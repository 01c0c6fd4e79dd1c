"""The Flywheel Faust app: assembler -> scorer -> router, plus the policy-version watcher.

    flywheel.steps.v1 --assembler--> flywheel.trajectories.v1 --scorer--> flywheel.scored.v1
        --router--> flywheel.sft.v1 | flywheel.ct.v1 | flywheel.rl.v1
    flywheel.policy.v1 --policy_watcher--> table policy-latest (read by the router)
    anything that fails, at any stage --> flywheel.dlq.v1 (stage, error, source topic/partition/offset)

Agents only iterate, call a pure function (streams.assemble / score / route) and send to a
declared topic. Records keep their source partition number end to end (an episode's steps,
trajectory, scored and routed records share a partition number), and every record carries the
deterministic ``event_id`` of its model, so consumers dedupe.

Delivery guarantee: at-least-once. Faust (``processing_guarantee="at_least_once"``; its
exactly-once mode has open duplicate/crash bugs) commits a source offset only after the event
was processed and after ``producer.flush()``, so every output of an event, and every
changelog write of the assembler table, is acknowledged before its input is marked consumed.
The producer is aiokafka with ``acks=all`` and ``enable_idempotence=True`` (``FlywheelApp``
below sets both; Faust alone enables idempotence only in its transactional mode), so broker
retries add no duplicates. A crash replays events after the last commit: the assembler table
(in memory, rebuilt from its compacted changelog topic on start) drops replayed steps by
(episode_id, step_index), and a replayed trajectory, score or route has the same event_id.
The assembler waits for the broker's acknowledgement of a trajectory before its table marks the
episode emitted, so a crash can duplicate a trajectory but never lose one. The scorer and router
take events in batches (``take_events``: Faust acks them only after the batch's code returned)
and wait for the broker's acknowledgement of every output and dead letter of the batch before
returning; the assembler waits for each trajectory and dead letter. A delivery that fails ends
the worker at once (``acknowledged``), before any offset past the record can be committed; the
restart replays it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import Any

import faust
from faust.serializers.codecs import Codec
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP

from infra.dlq import dead_letter
from infra.kafka import faust_credentials
from infra.settings import Settings
from infra.topics import STEP_PARTITIONS, TOPICS, topic_name
from schemas.base import now
from schemas.codec import decode, encode
from schemas.events import EpisodeEvent, PolicyVersion, ScoredTrajectory, Trajectory
from streams.assemble import EpisodeState, add_event, can_forget, close_abandoned
from streams.config import StreamsConfig, app_id_for
from streams.judge import make_judge
from streams.route import get_rule
from streams.score import make_scorer

log = logging.getLogger("flywheel.streams")
EXIT_DELIVERY_FAILED = 75  # a record's output or dead letter was not acknowledged: restart and replay
BATCH, BATCH_WITHIN_S = 512, 0.05  # scorer/router batches: bounded size and wait


async def acknowledged(futures) -> None:
    """Wait until the broker acknowledged every send. A failure ends the process at once: Faust
    would otherwise ack the events and commit past a record whose output or dead letter is lost."""
    try:
        await asyncio.gather(*futures)
    except Exception as exc:  # noqa: BLE001
        log.critical("a send was not acknowledged (%s); exiting without committing past it", exc)
        os._exit(EXIT_DELIVERY_FAILED)


class _IdempotentProducer(faust_aiokafka.Producer):
    def _settings_extra(self) -> dict[str, Any]:
        return {**super()._settings_extra(), "acks": "all", "enable_idempotence": True}


class _Transport(faust_aiokafka.Transport):
    Producer = _IdempotentProducer


class FlywheelApp(faust.App):
    """faust.App whose Kafka producer is idempotent with acks=all."""

    def _new_transport(self):
        return _Transport(self.conf.broker_consumer, self)

    def _new_producer_transport(self):
        return _Transport(self.conf.broker_producer, self)


class _StateCodec(Codec):
    """Assembler table values: EpisodeState objects in memory, our codec on the changelog."""

    def _dumps(self, obj: Any) -> bytes:
        return encode(obj)

    def _loads(self, s: bytes) -> Any:
        return decode(s, EpisodeState)


def make_app(settings: Settings, cfg: StreamsConfig) -> faust.App:
    """Build the app with its topics, tables, agents and timer (nothing starts until a worker runs it)."""
    datadir = settings.data_path / "streams"
    datadir.mkdir(parents=True, exist_ok=True)
    app = FlywheelApp(
        app_id_for(settings, cfg),
        broker=[f"kafka://{host.strip()}" for host in settings.bootstrap.split(",")],
        broker_credentials=faust_credentials(settings),
        processing_guarantee="at_least_once",
        store="memory://",  # rebuilt from the changelog on start: no RocksDB build needed
        datadir=str(datadir),
        topic_replication_factor=settings.replication_factor,
        topic_partitions=STEP_PARTITIONS,
        table_standby_replicas=cfg.standby_replicas,
        broker_commit_interval=cfg.commit_interval_s,
        broker_session_timeout=cfg.session_timeout_s,
        broker_heartbeat_interval=min(3.0, cfg.session_timeout_s / 3),
        consumer_auto_offset_reset="earliest",
        producer_acks=-1,
        producer_linger=cfg.producer_linger_ms / 1000,
        producer_max_request_size=TOPICS.trajectories.max_message_bytes,
        stream_buffer_maxsize=cfg.stream_buffer_maxsize,
        web_enabled=False,
        autodiscover=False,
    )

    def topic(spec):
        return app.topic(topic_name(spec, settings), key_type=bytes, value_type=bytes,
                         key_serializer="raw", value_serializer="raw")

    steps, trajectories, scored = topic(TOPICS.steps), topic(TOPICS.trajectories), topic(TOPICS.scored)
    routed = {spec.name: topic(spec) for spec in (TOPICS.sft, TOPICS.ct, TOPICS.rl)}
    policy, dlq = topic(TOPICS.policy), topic(TOPICS.dlq)

    episodes = app.Table("assembler", partitions=STEP_PARTITIONS, key_type=bytes)
    # Faust derives a table's codecs from its types (bytes -> raw, else json); ours goes on the
    # changelog before its topic is created, so recovery decodes EpisodeState objects.
    episodes.value_serializer = _StateCodec()
    episodes.changelog_topic = episodes._new_changelog_topic()  # the first one was built with json
    latest_policy = app.GlobalTable("policy-latest", partitions=1)  # json: policy name -> version

    scorer = make_scorer(cfg.scorer, make_judge(cfg.judge_url, cfg.judge_timeout_s))
    rule = get_rule(cfg.routing_rule)
    app.flywheel = {"settings": settings, "config": cfg, "scorer": scorer, "table": episodes}  # for tests

    async def to_dlq(stage: str, event, exc: BaseException):
        """Send the dead letter; -> its delivery future (the caller awaits it with ``acknowledged``)."""
        msg = event.message
        letter = dead_letter(stage, exc, msg.topic, msg.partition, msg.offset, event.key, event.value)
        log.warning("dead letter from %s at %s[%d]@%d: %s", stage, msg.topic, msg.partition, msg.offset,
                    letter.message[:200])
        return await dlq.send(key=event.key, value=encode(letter))

    @app.agent(steps, isolated_partitions=True)
    async def assembler(stream):
        async for event in stream.events():
            try:
                ev = decode(event.value, EpisodeEvent)
                key = ev.episode_id.encode()
                state, traj = add_event(episodes.get(key), ev, now())
                if traj is not None:
                    # Delivered before the table forgets the steps: a crash may repeat, never lose.
                    await (await trajectories.send(key=key, value=encode(traj), partition=event.message.partition))
                episodes[key] = state.model_copy(update={"partition": event.message.partition})
            except Exception as exc:  # noqa: BLE001 - errors are data: DLQ and keep flowing
                await acknowledged([await to_dlq("assembler", event, exc)])

    @app.agent(trajectories, isolated_partitions=True)
    async def score(stream):
        async for events in stream.take_events(BATCH, within=BATCH_WITHIN_S):
            sent = []
            for event in events:
                try:
                    traj = decode(event.value, Trajectory)
                    if scorer.judge is None:
                        result = scorer.score(traj, now())
                    else:  # the HTTP judge blocks: keep the event loop free
                        result = await asyncio.to_thread(scorer.score, traj, now())
                    sent.append(await scored.send(key=event.key, value=encode(result),
                                                  partition=event.message.partition))
                except Exception as exc:  # noqa: BLE001
                    sent.append(await to_dlq("scorer", event, exc))
            await acknowledged(sent)  # before the batch's events are acked

    @app.agent(scored, isolated_partitions=True)
    async def router(stream):
        async for events in stream.take_events(BATCH, within=BATCH_WITHIN_S):
            sent = []
            for event in events:
                try:
                    routing = rule(decode(event.value, ScoredTrajectory), latest_policy, cfg.max_staleness)
                    for spec, record in routing.records:
                        sent.append(await routed[spec.name].send(key=event.key, value=encode(record),
                                                                 partition=event.message.partition))
                except Exception as exc:  # noqa: BLE001
                    sent.append(await to_dlq("router", event, exc))
            await acknowledged(sent)

    @app.agent(policy)
    async def policy_watcher(stream):
        async for event in stream.events():
            try:
                pv = decode(event.value, PolicyVersion)
                if pv.version >= latest_policy.get(pv.policy, -1):
                    latest_policy[pv.policy] = pv.version
            except Exception as exc:  # noqa: BLE001
                await acknowledged([await to_dlq("policy_watcher", event, exc)])

    steps_name = topic_name(TOPICS.steps, settings)
    worker_started = time.time()

    @app.timer(interval=cfg.abandoned_scan_s)
    async def close_abandoned_episodes():
        # After a restart every recovered episode looks idle: give their events time to arrive.
        t = now()
        if t - worker_started < cfg.abandoned_timeout_s:
            return
        actives = app.assignor.assigned_actives()
        for key, state in list(episodes.data.items()):
            if TP(steps_name, state.partition) not in actives:
                continue  # a standby copy: the owner of the partition closes it
            if can_forget(state, t, cfg.tombstone_retention_s):
                del episodes.data[key]
                episodes.send_changelog(state.partition, key, None, value_serializer="raw")
                continue
            new, traj = close_abandoned(state, t, cfg.abandoned_timeout_s)
            if new is state:
                continue
            if traj is not None:
                log.info("closing abandoned episode %s (%d steps)", state.episode_id, len(traj.steps))
                await (await trajectories.send(key=key, value=encode(traj), partition=state.partition))
            else:
                exc = ValueError(f"episode {state.episode_id} abandoned without a started event")
                letter = dead_letter("assembler", exc, steps_name, state.partition, -1, key, encode(state))
                await acknowledged([await dlq.send(key=key, value=encode(letter))])
            if episodes.data.get(key) is state:  # the agent did not touch it meanwhile
                episodes.data[key] = new
                episodes.send_changelog(state.partition, key, new)

    return app


def declare_internal_topics(app: faust.App, settings: Settings) -> None:
    """Create the tables' changelog topics before the worker starts (see
    infra.admin.ensure_internal_topics: on three brokers Faust's own creation raced the metadata)."""
    from infra.admin import ensure_internal_topics

    topics = {table.changelog_topic.get_topic_name(): table.partitions or STEP_PARTITIONS
              for table in app.tables.values()}
    ensure_internal_topics(settings, topics, {"cleanup.policy": "compact"})


def run_worker(app: faust.App, loglevel: str = "info") -> None:
    """Run one worker until SIGINT/SIGTERM (a worker takes all partitions the group gives it)."""
    worker = faust.Worker(app, loglevel=loglevel, quiet=True)
    worker.execute_from_commandline()
