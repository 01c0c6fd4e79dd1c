"""The ClickHouse sink against the real broker and real embedded chDB (one tmp dir per test)."""

from __future__ import annotations

import threading
from contextlib import contextmanager

from confluent_kafka import Consumer

from tests.fakes.run import publish, synthetic_run
from consumers.sink import Sink, SinkConfig
from infra.clickhouse.client import make_client, migrate
from infra.runtime.kafka_clients import consumer_config, make_producer
from infra.runtime.topics import TOPICS, topic_name
from schemas.codec import decode, encode
from schemas.events import DeadLetter


@contextmanager
def client_for(settings):
    client = make_client(settings)
    try:
        yield client
    finally:
        client.close()  # one chDB engine per process: release it for the next test's directory


def run_sink(settings, group_id, **overrides):
    cfg = SinkConfig(group_id=group_id, exit_when_idle_s=1.5, flush_interval_s=0.5, query_port=-1, **overrides)
    return Sink(settings, cfg).run(threading.Event())


def scalar(client, sql):
    return client.query(sql).result_rows[0][0]


def test_embedded_ddl_insert_query(tmp_path):
    from infra.runtime.settings import load_settings
    from consumers.rows import rows_for

    settings = load_settings({"data_dir": str(tmp_path)})
    with client_for(settings) as client:
        assert migrate(client) == []  # make_client applied them; a second run is a no-op
        run = synthetic_run(6, seed=2)
        rows = [r for s in run.scored for r in rows_for("scored", s)["scored"]]
        client.insert("scored", [list(r.values()) for r in rows], column_names=list(rows[0]))
        client.insert("scored", [list(r.values()) for r in rows], column_names=list(rows[0]))  # a replay
        assert scalar(client, "SELECT count() FROM scored") == 12
        assert scalar(client, "SELECT count() FROM scored FINAL") == 6
        assert scalar(client, "SELECT sum(episodes) FROM v_success_by_policy") == 6


def test_trainer_metrics_view_shows_names_from_before_the_groups_under_todays(tmp_path):
    from consumers.rows import rows_for
    from infra.runtime.settings import load_settings
    from schemas.events import TrainerMetrics

    old = TrainerMetrics(run_id="r", update=1, policy="p", policy_version=1, ts=1.0,
                         metrics={"pg_loss": 0.5, "dpo/loss": 0.7, "losses/value_loss": 0.25, "custom": 1.0})
    rows = rows_for("metrics", old)["trainer_metrics"]
    with client_for(load_settings({"data_dir": str(tmp_path)})) as client:
        client.insert("trainer_metrics", [list(r.values()) for r in rows], column_names=list(rows[0]))
        got = client.query("SELECT name, value FROM v_trainer_metrics ORDER BY name").result_rows
    assert got == [("custom", 1.0), ("losses/dpo_loss", 0.7), ("losses/pg_loss", 0.5), ("losses/value_loss", 0.25)]


def test_a_steps_table_from_before_gains_sampled_and_its_rows_read_true(tmp_path, monkeypatch):
    """Migration 005 on a database the earlier migrations made, holding a step row already."""
    from consumers.rows import rows_for
    from infra.clickhouse import client as clickhouse
    from infra.runtime.settings import load_settings
    from schemas.events import Step

    step = next(e for e in synthetic_run(1, seed=2).episode_events if isinstance(e, Step))
    later = ("expert_action",)  # columns of migrations after 005 (008's)
    old = {c: v for c, v in rows_for("steps", step)["steps"][0].items() if c not in ("sampled", *later)}
    greedy = {c: v for c, v in rows_for("steps", step.model_copy(update={"step_index": 99, "sampled": False}))[
        "steps"][0].items() if c not in later}
    every = clickhouse.load_migrations()
    monkeypatch.setattr(clickhouse, "load_migrations", lambda: [m for m in every if m.version < 5])
    with client_for(load_settings({"data_dir": str(tmp_path)})) as client:  # the database as it stood
        client.insert("steps", [list(old.values())], column_names=list(old))
        monkeypatch.setattr(clickhouse, "load_migrations", lambda: [m for m in every if m.version <= 5])  # up to 005
        assert migrate(client) == ["005_step_sampled.sql"] and migrate(client) == []
        client.insert("steps", [list(greedy.values())], column_names=list(greedy))
        got = client.query("SELECT step_index, sampled FROM steps FINAL ORDER BY step_index").result_rows
    assert got == [(step.step_index, True), (99, False)]


def test_a_steps_table_from_before_gains_expert_action_and_its_rows_read_empty(tmp_path, monkeypatch):
    """Migration 008 on a database the earlier migrations made: old rows read '' (no label), a
    labelled step's row holds the label's JSON."""
    from consumers.rows import rows_for
    from infra.clickhouse import client as clickhouse
    from infra.runtime.settings import load_settings
    from schemas.actions import Hotkey
    from schemas.events import Step

    step = next(e for e in synthetic_run(1, seed=3).episode_events if isinstance(e, Step))
    old = {c: v for c, v in rows_for("steps", step)["steps"][0].items() if c != "expert_action"}
    labelled = rows_for("steps", step.model_copy(update={"step_index": 99, "expert_action": Hotkey(key="left")}))
    every = clickhouse.load_migrations()
    monkeypatch.setattr(clickhouse, "load_migrations", lambda: [m for m in every if m.version < 8])
    with client_for(load_settings({"data_dir": str(tmp_path)})) as client:
        client.insert("steps", [list(old.values())], column_names=list(old))
        monkeypatch.setattr(clickhouse, "load_migrations", lambda: every)
        assert migrate(client) == ["008_step_expert_action.sql"]
        row = labelled["steps"][0]
        client.insert("steps", [list(row.values())], column_names=list(row))
        got = client.query("SELECT step_index, JSONExtractString(expert_action, 'key') FROM steps FINAL "
                           "ORDER BY step_index").result_rows
    assert got == [(step.step_index, ""), (99, "left")]


def test_events_land_in_tables_and_replays_do_not_double_count(settings, group_id):
    run = synthetic_run(30, seed=5)
    publish(settings, run)
    publish(settings, run)  # the producer side re-sent everything
    stats = run_sink(settings, group_id)
    stats_replay = run_sink(settings, group_id + "-replay")  # reset offsets: a new group re-reads it all
    assert stats.messages == stats_replay.messages == 2 * (
        len(run.episode_events) + len(run.trajectories) + len(run.scored) + len(run.policies) + len(run.metrics))
    n_steps = sum(1 for e in run.episode_events if getattr(e, "kind", "") == "step")
    with client_for(settings) as client:
        assert scalar(client, "SELECT count() FROM steps") > n_steps  # duplicates were really inserted
        assert scalar(client, "SELECT count() FROM steps FINAL") == n_steps
        assert scalar(client, "SELECT count() FROM episodes FINAL") == 2 * len(run.trajectories)
        assert scalar(client, "SELECT count() FROM trajectories FINAL") == len(run.trajectories)
        assert scalar(client, "SELECT count() FROM scored FINAL") == len(run.scored)
        assert scalar(client, "SELECT count() FROM policy_versions FINAL") == len(run.policies)
        assert scalar(client, "SELECT count() FROM trainer_metrics FINAL") == len(run.metrics)
        assert scalar(client, "SELECT sum(episodes) FROM v_success_by_policy") == len(run.scored)
        assert scalar(client, "SELECT sum(trajectories) FROM v_staleness_histogram") == len(run.scored)
        assert scalar(client, "SELECT sum(steps) FROM v_action_types") == n_steps


def test_bad_record_goes_to_dlq_and_valid_ones_keep_flowing(settings, group_id):
    run = synthetic_run(8, seed=6)
    steps_topic = topic_name(TOPICS.steps, settings)
    producer = make_producer(settings)
    producer.produce(steps_topic, key=b"ep-bad", value=b"{not json", partition=0)
    producer.produce(steps_topic, key=b"ep-bad", value=encode(run.policies[0]), partition=0)  # wrong type
    producer.flush(10)
    publish(settings, run)
    stats = run_sink(settings, group_id)
    assert stats.dead_letters == 2
    n_steps = sum(1 for e in run.episode_events if getattr(e, "kind", "") == "step")
    with client_for(settings) as client:
        assert scalar(client, "SELECT count() FROM steps FINAL") == n_steps
        # the sink also reads the DLQ topic, so its own dead letters are in the table
        rows = client.query("SELECT stage, source_topic, source_offset FROM dead_letters FINAL ORDER BY source_offset").result_rows
        assert rows == [("sink", steps_topic, 0), ("sink", steps_topic, 1)]
        assert scalar(client, "SELECT sum(letters) FROM v_dead_letters_by_stage WHERE stage = 'sink'") == 2
    consumer = Consumer(consumer_config(settings, group_id + "-check"))
    consumer.subscribe([topic_name(TOPICS.dlq, settings)])
    letters = []
    for _ in range(40):
        letters += [m for m in consumer.consume(10, timeout=0.5) if not m.error()]
        if len(letters) >= 2:
            break
    consumer.close()
    decoded = [decode(m.value(), DeadLetter) for m in letters]
    assert {(d.stage, d.source_offset) for d in decoded} == {("sink", 0), ("sink", 1)}
    assert decoded[0].error_type == "invalid_json"


def test_out_of_range_integers_are_dead_lettered_and_never_stop_the_sink(settings, group_id):
    """2**32 in a UInt32 field: refused by the schema on decode (-> DLQ); and a row that bypassed
    validation and that ClickHouse rejects is bisected out of its batch (-> DLQ), the rest written."""
    import orjson

    from consumers.rows import row_for

    run = synthetic_run(6, seed=7)
    steps_topic = topic_name(TOPICS.steps, settings)
    step = next(e for e in run.episode_events if getattr(e, "kind", "") == "step")
    too_big = orjson.loads(encode(step))
    too_big["step_index"] = 2**32
    producer = make_producer(settings)
    producer.produce(steps_topic, key=step.episode_id.encode(), value=orjson.dumps(too_big), partition=0)
    producer.flush(10)
    publish(settings, run)
    stats = run_sink(settings, group_id)
    assert stats.dead_letters == 1  # the schema's bound equals the column's

    # a row that slipped past validation (e.g. a mapping bug) and that ClickHouse rejects
    from consumers.rows import COLUMNS
    from infra.runtime.consume_loop import DeadLetters

    cfg = SinkConfig(group_id=group_id + "-direct", query_port=-1)
    sink = Sink(settings, cfg)
    dlq = DeadLetters(make_producer(settings), settings, "sink")
    try:
        good = [row_for("metrics", m)[1] for m in run.metrics]
        update = COLUMNS["trainer_metrics"].index("update")
        bad = ("bad-row",) + good[0][1:update] + (2**32,) + good[0][update + 1:]
        rows = good[:1] + [bad] + good[1:]
        sink.rows["trainer_metrics"] = rows
        sink.records["trainer_metrics"] = [_Record("src", 0, i) for i in range(len(rows))]
        sink.flush(dlq)
        dlq.acknowledge()
        assert sink.stats.dead_letters == 1 and sink.stats.rows == len(good)
    finally:
        sink.client.close()
    with client_for(settings) as client:
        assert scalar(client, "SELECT countIf(event_id = 'bad-row') FROM trainer_metrics") == 0
    letters = [decode(m.value(), DeadLetter) for m in _read_all(settings, TOPICS.dlq)]
    assert {(d.source_topic, d.source_offset) for d in letters} >= {(steps_topic, 0), ("src", 1)}
    assert any("update" in d.message for d in letters if d.source_topic == "src")


class _Record:
    """The source record of a buffered row, as the consumer hands it over."""

    def __init__(self, topic, partition, offset):
        self._where = (topic, partition, offset)

    def topic(self): return self._where[0]
    def partition(self): return self._where[1]
    def offset(self): return self._where[2]
    def key(self): return b"k"
    def value(self): return b"{}"


def _read_all(settings, spec):
    from infra.runtime.kafka_clients import read_to_end

    return list(read_to_end(settings, topic_name(spec, settings), timeout_s=30))


def test_the_demo_counts_only_its_own_runs_dead_letters(tmp_path):
    """The progress line's dlq figure: letters from an earlier run's topics in the same ClickHouse
    are not this run's (they made a fresh run print 'dlq 1')."""
    from consumers.rows import rows_for
    from app.demo_queries import latest_versions
    from infra.runtime.settings import load_settings
    from infra.runtime.dlq import dead_letter

    settings = load_settings({"data_dir": str(tmp_path)})
    letters = [dead_letter("annotate", ValueError("x"), f"demo-{run}.flywheel.ct.v1", 0, k, b"k", b"v")
               for k, run in enumerate(["old", "new", "new"])]
    with client_for(settings) as client:
        rows = [r for d in letters for r in rows_for("dlq", d)["dead_letters"]]
        client.insert("dead_letters", [list(r.values()) for r in rows], column_names=list(rows[0]))
        assert client.query(latest_versions("p", "demo-new.")).result_rows[0][3] == 2
        assert client.query(latest_versions("p", "demo-old.")).result_rows[0][3] == 1
        assert client.query(latest_versions("p")).result_rows[0][3] == 3
