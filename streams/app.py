"""The Flywheel Faust worker: the declared topology (``streams.topology.pipeline``) fused in one agent.

    flywheel.steps.v1 --pipeline agent: assembler -> scorer -> router, in process-->
        flywheel.trajectories.v1, flywheel.scored.v1, flywheel.sft.v1 | flywheel.ct.v1 | flywheel.rl.v1
    flywheel.policy.v1 --policy_watcher--> table policy-latest (read by the router)
    anything that fails, at any stage --> flywheel.dlq.v1 (stage = the failing stage's step id)

Each step event is consumed once: the assembler adds it to its episode's state, and a trajectory
it closes goes through the scorer and the router in memory (``FusedChain``, ``run_chain``), the
way Kafka Streams fuses sub-topologies that share a key. Every intermediate record is still
published to its declared topic, with the same deterministic ``event_id`` as before, for
outside consumers; nothing here consumes them again. The stages, their topics and functions are
declared in streams.topology; this module only moves bytes. Records keep their source partition
number end to end (an episode's steps, trajectory, scored and routed records share a partition
number), so consumers can dedupe and join by partition.

Delivery guarantee: at-least-once. Faust (``processing_guarantee="at_least_once"``) commits a
source offset only after the event was acked and after ``producer.flush()``. Every agent takes
events in batches (``take_events``: Faust acks a batch's events only after the batch's code
returned) and, before returning, waits for the broker's acknowledgement of every output and
dead letter of the batch (``acknowledged``, one gather per batch rather than one await per
record). A delivery that fails ends the worker at once, before any offset past the record can be
committed; the restart replays it. The producer is aiokafka with ``acks=all`` and
``enable_idempotence=True`` (``FlywheelApp`` below sets both; Faust alone enables idempotence
only in its transactional mode), so broker retries add no duplicates. And every agent admits a
partition's records in offset order only (``in_order``, streams.continuity): Faust's fetcher was
seen to skip records right after a restart and then commit over the hole; now the hole is never
committed and the worker restarts itself to replay it.

The assembler keeps one EpisodeState per episode in a table (in memory, rebuilt from its
compacted changelog on start). It writes the table once per episode per batch, after the
batch's trajectories, scored and routed records were acknowledged, so a crash can repeat them
(same event_ids) but never lose one; and it waits for the broker's acknowledgement of those changelog writes too
before the batch returns, so no source offset is committed ahead of the table state it produced.
(Faust's own ``send_changelog`` is not enough: it queues the write in a buffer whose ``flush``
gives up after 0.1 s, so under load Faust committed offsets whose table writes were still
queued, and a SIGKILL then lost those steps from the table for good.) A replay after a crash
drops steps already in the table by (episode_id, step_index). The abandoned-episode timer
applies ``streams.assemble.sweep`` the same way: each closed episode scored and routed through
the same chain, acknowledged, then the table written and acknowledged.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time
from typing import Any

import faust
from faust.serializers.codecs import Codec
from faust.transport.drivers import aiokafka as faust_aiokafka

from infra.runtime.dlq import dead_letter
from infra.runtime.kafka_clients import faust_credentials
from infra.runtime.metrics import ProcessMetrics, process_metrics
from infra.runtime.settings import Settings
from infra.runtime.topics import STEP_PARTITIONS, TOPICS, topic_name
from schemas.base import now
from schemas.codec import decode, encode
from schemas.events import PolicyVersion
from streams.assemble import EpisodeState, Sweep, sweep
from streams.config import StreamsConfig, app_id_for
from streams.judge import make_judge
from streams.route import get_rule
from streams.continuity import OffsetGuard, Verdict
from streams.score import make_scorer, parse_judge_tasks
from streams.topology import Output, Stage, StageFailed, encoded, pipeline, run_chain, run_keyed
from infra.runtime.admin import ensure_internal_topics

log = logging.getLogger("flywheel.streams")
CHANGELOG = "assembler-changelog"  # the send() name of the assembler table's changelog topic
EXIT_DELIVERY_FAILED = 75  # a record's output or dead letter was not acknowledged: restart and replay


def delivery_failed(exc: BaseException) -> None:
    """End the process at once. Raising would not do: Faust acks a batch's events even when the
    agent crashes, and would commit past a record whose output or dead letter is lost."""
    log.critical("a send was not acknowledged (%s); exiting without committing past it", exc)
    os._exit(EXIT_DELIVERY_FAILED)


def restart_after_hole(topic: str, partition: int, want: int, got: int) -> None:
    """Faust's fetcher skipped records (streams.continuity): start this worker afresh, in the
    same process (``exec``: the same pid, so a supervisor or a test still holds it). Nothing past
    the hole was acked, so the new worker resumes at or before ``want`` and replays the rest."""
    log.critical("%s[%d]: offset %d delivered while %d was expected (records skipped by the fetcher); "
                 "restarting the worker to replay from the committed offset", topic, partition, got, want)
    logging.shutdown()
    os.execv(sys.executable, sys.orig_argv)


async def acknowledged(futures) -> None:
    """Wait until the broker acknowledged every send (one gather per batch); a failure ends the process."""
    try:
        await asyncio.gather(*futures)
    except Exception as exc:  # noqa: BLE001
        delivery_failed(exc)


class _IdempotentProducer(faust_aiokafka.Producer):
    def _settings_extra(self) -> dict[str, Any]:
        return {**super()._settings_extra(), "acks": "all", "enable_idempotence": True}


class _GaplessConsumer(faust_aiokafka.Consumer):
    """Faust's consumer, except that on the stage topics (``FlywheelApp.gapless_topics``) a jump
    in offsets is never recorded as a gap to commit over (see streams.continuity)."""

    async def _add_gap(self, tp, offset_from: int, offset_to: int) -> None:
        if tp.topic not in self.app.gapless_topics:
            await super()._add_gap(tp, offset_from, offset_to)


class _Transport(faust_aiokafka.Transport):
    Consumer = _GaplessConsumer
    Producer = _IdempotentProducer


class FlywheelApp(faust.App):
    """faust.App whose Kafka producer is idempotent with acks=all, and whose consumer commits
    over no hole in ``gapless_topics``."""

    gapless_topics: frozenset[str] = frozenset()

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


STATE_CODEC = _StateCodec()


RECORD_OVERHEAD = 1024  # bytes a record's batch, headers and framing add to its key and value, at most


class FusedChain:
    """The stages after the assembler (scorer -> router), run in process on every trajectory the
    assembler or the abandoned-episode sweep closes. Every record still goes to its declared
    topic, with its partition number and deterministic id; a stage that raises dead-letters its
    own input (``stage`` = that stage's step id, source = where that input was published), and
    what the stages before it emitted is still sent. A blocking stage (the HTTP judge) runs off
    the event loop, the batch's calls concurrently."""

    def __init__(self, chain: tuple[Stage, ...], send, names: dict[str, str], blocking: bool,
                 metrics: ProcessMetrics) -> None:
        self.chain, self.send, self.names, self.blocking, self.metrics = chain, send, names, blocking, metrics

    async def publish(self, closed: list[tuple[bytes, int, list[Output]]], t: float) -> list:
        """``closed``: (key, partition, the assembler's outputs) -> every delivery future."""
        heads = [rec for _, _, outputs in closed for spec, rec in outputs if spec == self.chain[0].source]
        if self.blocking:
            results = await asyncio.gather(*(asyncio.to_thread(_chain_or_failure, self.chain, rec, t) for rec in heads))
        else:
            results = [_chain_or_failure(self.chain, rec, t) for rec in heads]
        chained = {id(rec): result for rec, result in zip(heads, results)}
        sent = []
        for key, partition, outputs in closed:
            everything, failures, published = list(outputs), [], {}
            for _, rec in outputs:
                if id(rec) in chained:
                    emitted, failure = chained[id(rec)]
                    everything += emitted
                    failures += [failure] if failure is not None else []
            values = [value for _, value in encoded(everything)]
            too_big = next(((spec, value) for (spec, _), value in zip(everything, values)
                            if len(key) + len(value) + RECORD_OVERHEAD > spec.max_message_bytes), None)
            if too_big is not None:  # the broker would refuse it, and the worker would stop on it for ever
                sent.append(await self._too_big(*too_big, key, partition))
                continue
            for (spec, rec), value in zip(everything, values):
                future = await self.send(spec, key, value, partition)
                published.setdefault(id(rec), (future, value))
                sent.append(future)
            for failure in failures:
                sent.append(await self._dead_letter(failure, key, published[id(failure.record)]))
        return sent

    async def _too_big(self, spec, value: bytes, key: bytes, partition: int):
        """One dead letter for an episode whose record exceeds its topic's max.message.bytes: none
        of the episode's records is published (its steps stay on the steps topic, for a replay
        once the limit is raised); the letter names the stage that made the record and keeps its
        first bytes."""
        stage = self._maker_of(spec)
        exc = ValueError(f"a {len(value)}-byte record for {spec.name} exceeds its max.message.bytes "
                         f"({spec.max_message_bytes}): episode {key.decode(errors='replace')} not published")
        letter = dead_letter(stage, exc, self.names.get(spec.name, spec.name), partition, -1, key, value)
        self.metrics["flywheel_streams_dead_letters_total"].labels(stage=stage).inc()
        log.warning("dead letter from %s: %s", stage, letter.message[:200])
        return await self.send(TOPICS.dlq, key, encode(letter))

    def _maker_of(self, spec) -> str:
        """The stage whose output goes to ``spec``: the assembler for the first stage's input."""
        for i, stage in enumerate(self.chain):
            if stage.source.name == spec.name:
                return self.chain[i - 1].step_id if i else "assembler"
        return self.chain[-1].step_id

    async def _dead_letter(self, failure: StageFailed, key: bytes, published):
        """The failing stage's input, at the position it was published (its delivery awaited)."""
        future, value = published
        try:
            meta = await future
        except Exception as exc:  # noqa: BLE001
            delivery_failed(exc)
        letter = dead_letter(failure.stage.step_id, failure.cause, self.names[failure.stage.source.name],
                             meta.partition, meta.offset, key, value)
        self.metrics["flywheel_streams_dead_letters_total"].labels(stage=letter.stage).inc()
        log.warning("dead letter from %s at %s[%d]@%d: %s", letter.stage, letter.source_topic, meta.partition,
                    meta.offset, letter.message[:200])
        return await self.send(TOPICS.dlq, key, encode(letter))


def _chain_or_failure(chain: tuple[Stage, ...], record, t: float) -> tuple[list[Output], StageFailed | None]:
    try:
        return run_chain(chain, record, t), None
    except StageFailed as failure:
        return failure.emitted, failure


def make_app(settings: Settings, cfg: StreamsConfig, metrics: ProcessMetrics | None = None) -> faust.App:
    """The Faust app running ``streams.topology.pipeline``: one agent per stage, the policy
    watcher feeding the router's table, and the abandoned-episode timer (nothing starts until a
    worker runs it)."""
    datadir = settings.data_path / "streams"
    datadir.mkdir(parents=True, exist_ok=True)
    app = FlywheelApp(app_id_for(settings, cfg), datadir=str(datadir), **faust_settings(settings, cfg))
    metrics = metrics if metrics is not None else process_metrics("streams")
    published = metrics["flywheel_streams_records_total"]
    published_to: dict[str, object] = {}  # topic -> its labelled child: labels() per record costs a lock and a dict
    topics = {spec.name: app.topic(topic_name(spec, settings), key_type=bytes, value_type=bytes,
                                   key_serializer="raw", value_serializer="raw")
              for spec in (TOPICS.steps, TOPICS.trajectories, TOPICS.scored, TOPICS.sft, TOPICS.ct, TOPICS.rl,
                           TOPICS.policy, TOPICS.dlq)}
    # Values are EpisodeState objects in memory and our codec on the changelog (so recovery
    # decodes them); every write goes through ``_store`` with that codec.
    changelog = app.topic(f"{app.conf.id}-assembler-changelog", key_type=bytes, value_serializer=STATE_CODEC,
                          partitions=STEP_PARTITIONS, compacting=True, deleting=False, acks=False, internal=True)
    episodes = app.Table("assembler", partitions=STEP_PARTITIONS, key_type=bytes, changelog_topic=changelog)
    latest_policy = app.GlobalTable("policy-latest", partitions=1)  # json: policy name -> version

    scorer = make_scorer(cfg.scorer, make_judge(cfg.judge_url, cfg.judge_timeout_s),
                         parse_judge_tasks(cfg.judge_tasks), cfg.judge_success_at)
    assemble, score, route = pipeline(scorer, get_rule(cfg.routing_rule), latest_policy, settings.max_staleness)

    names = {name: t.get_topic_name() for name, t in topics.items()}
    names[CHANGELOG] = changelog.get_topic_name()
    app.gapless_topics = frozenset({names[TOPICS.steps.name]})
    guard = OffsetGuard()

    @app.on_partitions_assigned.connect
    async def _start_over(sender, assigned, **kwargs) -> None:  # noqa: ARG001 - the signal's signature
        guard.forget()

    async def in_order(events) -> list:
        """The events of a batch the stage may process: each partition's next offsets, in order
        (streams.continuity). On a jump the worker restarts before anything past the hole is acked."""
        consumer, admitted = app.consumer, []
        for event in events:
            msg = event.message
            committed = consumer._committed_offset.get(msg.tp)  # Faust keeps no public accessor
            verdict = guard.admit(msg.tp, msg.offset, committed)
            if verdict is Verdict.PROCESS:
                admitted.append(event)
            elif verdict is Verdict.JUMP:
                want = guard.expected(msg.tp, committed)
                start = (await consumer.earliest_offsets(msg.tp)).get(msg.tp, 0)
                if start > want:  # deleted by retention before anyone read them: nothing to wait for
                    log.warning("%s[%d]: offsets %d..%d expired before they were read; going on from %d",
                                msg.topic, msg.partition, want, start - 1, start)
                    guard.expired_to(msg.tp, start)
                    if msg.offset == start:
                        guard.admit(msg.tp, msg.offset, committed)
                        admitted.append(event)
                    continue
                restart_after_hole(msg.topic, msg.partition, want, msg.offset)
        return admitted

    async def send(spec, key: bytes, value: bytes | None, partition: int | None = None):
        """-> the delivery future (awaited in batches with ``acknowledged``). Straight to the
        producer: Faust's Topic.send adds a message object, a codec pass and a debug log per record."""
        try:
            if not isinstance(spec, str):  # a str is the table's changelog
                counter = published_to.get(spec.name) or published_to.setdefault(spec.name, published.labels(topic=spec.name))
                counter.inc()
            return await app.producer.send(names[spec if isinstance(spec, str) else spec.name], key, value,
                                           partition, None, None)
        except Exception as exc:  # noqa: BLE001 - e.g. no metadata for the topic: not the record's fault
            delivery_failed(exc)

    async def to_dlq(stage: str, event, exc: BaseException):
        """Send the dead letter; -> its delivery future (awaited with ``acknowledged``)."""
        msg = event.message
        letter = dead_letter(stage, exc, msg.topic, msg.partition, msg.offset, event.key, event.value)
        metrics["flywheel_streams_dead_letters_total"].labels(stage=stage).inc()
        log.warning("dead letter from %s at %s[%d]@%d: %s", stage, msg.topic, msg.partition, msg.offset,
                    letter.message[:200])
        return await send(TOPICS.dlq, event.key, encode(letter))

    fused = FusedChain((score, route), send, names, blocking=score.blocking, metrics=metrics)

    # One actor per partition: a revoked partition's actor stops with it, so a worker never
    # writes the table of a partition another worker now owns.
    @app.agent(topics[assemble.source.name], name="pipeline", isolated_partitions=True)
    async def pipeline_agent(stream):
        async for batch in stream.take_events(cfg.batch_max, within=cfg.batch_within_s):
            t, touched, closed, sent, started = now(), {}, [], [], time.perf_counter()
            for event in await in_order(batch):
                try:
                    record = decode(event.value, assemble.model)
                    key = record.episode_id.encode()
                    before = touched[key][0] if key in touched else episodes.data.get(key)  # as _store writes it
                    state, outputs = run_keyed(assemble, before, record, t)
                except Exception as exc:  # noqa: BLE001 - errors are data: DLQ and keep flowing
                    sent.append(await to_dlq(assemble.step_id, event, exc))
                    continue
                touched[key] = (state, event.message)
                if outputs:
                    closed.append((key, event.message.partition, outputs))
            # Trajectories, their scored and routed records acknowledged before the table forgets
            # their steps: a crash may repeat one, never lose one. One table write per episode per batch.
            sent += await fused.publish(closed, t)
            await acknowledged(sent)
            await acknowledged([await _store(episodes, send, key, state.model_copy(
                update={"partition": msg.partition, "last_offset": msg.offset})) for key, (state, msg) in touched.items()])
            metrics["flywheel_streams_events_total"].inc(len(batch))
            metrics["flywheel_streams_batch_seconds"].observe(time.perf_counter() - started)

    @app.agent(topics[TOPICS.policy.name])
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
        t = now()
        if t - worker_started < cfg.abandoned_timeout_s:
            return  # after a restart every recovered episode looks idle: give its events time
        owned = {tp.partition for tp in app.assignor.assigned_actives() if tp.topic == steps_name}
        decision = sweep(dict(episodes.data.items()), t, cfg.abandoned_timeout_s, cfg.tombstone_retention_s, owned)
        await _apply_sweep(decision, episodes, steps_name, send, fused, t)

    return app


def faust_settings(settings: Settings, cfg: StreamsConfig) -> dict[str, Any]:
    """The worker's Faust/aiokafka settings (why each is set is said beside it)."""
    return dict(
        broker=[f"kafka://{host.strip()}" for host in settings.bootstrap.split(",")],
        broker_credentials=faust_credentials(settings),
        processing_guarantee="at_least_once",  # its exactly-once mode has open duplicate/crash bugs
        store="memory://",  # rebuilt from the changelog on start: no RocksDB build needed
        topic_replication_factor=settings.replication_factor,
        topic_partitions=STEP_PARTITIONS,
        table_standby_replicas=cfg.standby_replicas,
        broker_commit_interval=cfg.commit_interval_s,
        broker_commit_every=cfg.commit_every,
        broker_session_timeout=cfg.session_timeout_s,
        broker_heartbeat_interval=min(3.0, cfg.session_timeout_s / 3),
        consumer_auto_offset_reset="earliest",
        producer_acks=-1,
        producer_linger=cfg.producer_linger_ms / 1000,
        # one batch holds many trajectories (Faust's 16 KiB default holds about one)
        producer_max_batch_size=cfg.producer_batch_bytes,
        producer_max_request_size=TOPICS.trajectories.max_message_bytes,
        stream_buffer_maxsize=cfg.stream_buffer_maxsize,
        web_enabled=False,
        autodiscover=False,
    )


async def _store(table, send, key: bytes, state: EpisodeState):
    """How the assembler table is written: memory, then its changelog; -> the changelog write's
    delivery future, which the caller acknowledges before its batch returns (see the module doc)."""
    table.data[key] = state
    return await send(CHANGELOG, key, STATE_CODEC.dumps(state), state.partition)


async def _forget(table, send, key: bytes):
    """Drop an episode from the table; -> the tombstone's delivery future (None if it was not there)."""
    state = table.data.pop(key, None)
    if state is not None:  # a tombstone on the compacted changelog deletes it there too
        return await send(CHANGELOG, key, None, state.partition)
    return None


async def _apply_sweep(decision: Sweep, table, steps_name: str, send, fused: "FusedChain", t: float) -> None:
    """Apply the timer's decision: each closed episode's trajectory through the fused chain (so it
    is scored and routed like any other), or a dead letter for a state that never had a started
    event; wait for their acknowledgement, then update the table."""
    sent, closed = [], []
    for c in decision.closures:
        if c.trajectory is not None:
            log.info("closing abandoned episode %s (%d steps)", c.before.episode_id, len(c.trajectory.steps))
            closed.append((c.key, c.before.partition, [(TOPICS.trajectories, c.trajectory)]))
        else:
            exc = ValueError(f"episode {c.before.episode_id} abandoned without a started event")
            # The source position is the episode's last event, so each such letter has its own id.
            letter = dead_letter("assembler", exc, steps_name, c.before.partition, c.before.last_offset, c.key,
                                 encode(c.before))
            fused.metrics["flywheel_streams_dead_letters_total"].labels(stage="assembler").inc()
            sent.append(await send(TOPICS.dlq, c.key, encode(letter)))
    sent += await fused.publish(closed, t)
    await acknowledged(sent)
    writes = [await _store(table, send, c.key, c.after) for c in decision.closures
              if table.data.get(c.key) is c.before]  # the agent did not touch it meanwhile
    writes += [await _forget(table, send, key) for key in decision.forget]
    await acknowledged([w for w in writes if w is not None])


def declare_internal_topics(app: faust.App, settings: Settings) -> None:
    """Create the tables' changelog topics before the worker starts (see
    infra.runtime.admin.ensure_internal_topics: on three brokers Faust's own creation raced the metadata)."""

    topics = {table.changelog_topic.get_topic_name(): table.partitions or STEP_PARTITIONS
              for table in app.tables.values()}
    ensure_internal_topics(settings, topics, {"cleanup.policy": "compact"})


def run_worker(app: faust.App, loglevel: str = "info") -> None:
    """Run one worker until SIGINT/SIGTERM (a worker takes all partitions the group gives it)."""
    worker = faust.Worker(app, loglevel=loglevel, quiet=True)
    worker.spinner = None  # its log handler sets the root logger to DEBUG: every library debug line costs
    worker.execute_from_commandline()
