"""Row mapping of the ClickHouse sink: pure functions, no ClickHouse."""

from __future__ import annotations

import re
from importlib import resources

import pytest

from consumers.rows import SINK_KINDS, rows_for
from consumers.sample import synthetic_run
from infra.clickhouse import load_migrations, split_statements
from schemas.base import now
from schemas.events import DeadLetter, EpisodeAborted, EpisodeEnded, EpisodeStarted, Step


def ddl_columns() -> dict[str, list[str]]:
    """Columns per table as written in 001_tables.sql (the DEFAULT column is the sink's own)."""
    sql = resources.files("infra").joinpath("sql", "001_tables.sql").read_text()
    tables = {}
    for stmt in split_statements(sql):
        name = re.search(r"CREATE TABLE IF NOT EXISTS (\w+)", stmt).group(1)
        body = stmt[stmt.index("(") + 1: stmt.rindex(") ENGINE")]
        cols = [ln.strip().split()[0] for ln in body.splitlines() if ln.strip()]
        tables[name] = [c for c in cols if c != "ingested_at"]
    return tables


@pytest.fixture(scope="module")
def run():
    return synthetic_run(n_episodes=12, seed=3)


def test_every_row_has_exactly_the_table_columns(run):
    columns = ddl_columns()
    samples = [("steps", e) for e in run.episode_events] + [("trajectories", t) for t in run.trajectories]
    samples += [("scored", s) for s in run.scored] + [("policy", p) for p in run.policies]
    samples += [("metrics", m) for m in run.metrics]
    seen = set()
    for kind, event in samples:
        for table, rows in rows_for(kind, event).items():
            seen.add(table)
            for row in rows:
                assert list(row) == columns[table], table
                assert row["event_id"] == event.event_id
    assert seen == set(columns) - {"dead_letters"}


def test_episode_events_split_into_steps_and_episodes(run):
    kinds = {}
    for event in run.episode_events:
        (table, rows), = rows_for("steps", event).items()
        kinds.setdefault(type(event), set()).add(table)
    assert kinds[Step] == {"steps"}
    assert kinds[EpisodeStarted] == {"episodes"}
    assert kinds.get(EpisodeEnded, {"episodes"}) == {"episodes"}
    assert kinds.get(EpisodeAborted, {"episodes"}) == {"episodes"}


def test_step_row_derives_action_type_and_thought_length(run):
    step = next(e for e in run.episode_events if isinstance(e, Step) and e.action is not None)
    row = rows_for("steps", step)["steps"][0]
    assert row["action_type"] == step.action.type
    assert row["thought_words"] == len(step.thought.split())
    assert row["thought_chars"] == len(step.thought)
    assert row["ts"].tzinfo is not None and abs(row["ts"].timestamp() - step.ts) < 1e-3
    unparsed = step.model_copy(update={"action": None, "parse_error": "bad"})
    assert rows_for("steps", unparsed)["steps"][0]["action_type"] == ""


def test_scored_row_keeps_scorer_identity_and_versions(run):
    s = run.scored[0]
    row = rows_for("scored", s)["scored"][0]
    assert (row["scorer"], row["scorer_version"]) == (s.scorer, s.scorer_version)
    assert row["event_id"] == f"{s.episode_id}:{s.scorer}:{s.scorer_version}"
    assert (row["policy_version_min"], row["policy_version_max"]) == s.trajectory.policy_versions
    assert row["components"] == s.components


def test_dead_letter_row():
    d = DeadLetter(stage="sink", error_type="invalid_json", message="bad", source_topic="t", source_partition=2,
                   source_offset=7, original_value="eA==", ts=now())
    row = rows_for("dlq", d)["dead_letters"][0]
    assert list(row) == ddl_columns()["dead_letters"]
    assert row["event_id"] == "t:2:7:sink"


def test_unknown_kind_is_rejected():
    assert "tasks" not in SINK_KINDS
    with pytest.raises(KeyError):
        rows_for("tasks", object())


def test_migrations_are_numbered_and_idempotent_ddl():
    migs = load_migrations()
    assert [m.version for m in migs] == sorted(m.version for m in migs)
    for m in migs:
        for stmt in m.statements:
            assert "IF NOT EXISTS" in stmt or "OR REPLACE" in stmt, stmt[:60]
