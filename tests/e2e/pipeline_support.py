"""An episode recorded through the Annotate view, carried on as the streams and the sink would
carry it: its trajectory on flywheel.trajectories.v1 and its rows in ClickHouse (for the views and
the corrections that read them, with no stream processor or sink running)."""

from __future__ import annotations

from consumers.rows import COLUMNS, row_for
from infra.clickhouse.client import make_client
from infra.runtime.kafka_clients import DeliveryTracker, flush_or_raise, make_producer, read_to_end
from infra.runtime.topics import TOPICS, topic_name
from schemas.codec import decode, encode
from schemas.events import EpisodeEvent
from streams.route import get_rule
from streams.score import make_scorer
from streams.topology import pipeline, run_keyed


def steps_events(settings) -> list:
    return [decode(r.value(), EpisodeEvent) for r in read_to_end(settings, topic_name(TOPICS.steps, settings))]


def assembled(events):
    """The first trajectory the streams' assembler makes of ``events`` (None: no episode ended)."""
    assemble, _, _ = pipeline(make_scorer("rule-v1"), get_rule("flywheel-v1"), {}, 4)
    state, trajectory = None, None
    for e in events:
        state, out = run_keyed(assemble, state, e, e.ts)
        trajectory = trajectory or next((t for _spec, t in out), None)
    return trajectory


def as_the_pipeline_would(settings, events) -> str:
    """The failed episode of ``events``: its trajectory on flywheel.trajectories.v1 and its rows in
    ClickHouse, as the streams and the sink write them; -> its episode id."""
    trajectory = assembled(events)
    assert trajectory is not None and not trajectory.success
    producer, tracker = make_producer(settings), DeliveryTracker()
    producer.produce(topic_name(TOPICS.trajectories, settings), key=trajectory.episode_id.encode(),
                     value=encode(trajectory), on_delivery=tracker)
    flush_or_raise(producer, tracker)
    client = make_client(settings)
    try:
        for kind, event in [*(("steps", e) for e in events if e.kind == "step"), ("trajectories", trajectory)]:
            table, values = row_for(kind, event)
            client.insert(table, [list(values)], column_names=COLUMNS[table])
    finally:
        client.close()
    return trajectory.episode_id
