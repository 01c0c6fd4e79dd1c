"""Row mapping of the ClickHouse sink: pure functions, no ClickHouse."""

from __future__ import annotations

import re

import pytest

from consumers.rows import SINK_KINDS, rows_for
from tests.fakes.run import synthetic_run
from infra.clickhouse.client import load_migrations
from schemas.base import now
from schemas.actions import Click
from schemas.events import (
    BlobRef, DeadLetter, EpisodeAborted, EpisodeEnded, EpisodeStarted, Observation, PairSide, PreferencePair, Step,
    TaskSpec,
)


def ddl_columns() -> dict[str, list[str]]:
    """Columns per table as the migrations leave them, in order: created, then added by a later
    ``ALTER TABLE ... ADD COLUMN`` (the DEFAULT column ingested_at is the sink's own)."""
    tables = {}
    for stmt in (s for m in load_migrations() for s in m.statements):
        created = re.search(r"CREATE TABLE IF NOT EXISTS (\w+)", stmt)
        added = re.match(r"ALTER TABLE (\w+) ADD COLUMN IF NOT EXISTS (\w+)\b.*?(?:\sAFTER (\w+))?$", stmt, re.S)
        if created is not None:
            body = stmt[stmt.index("(") + 1: stmt.rindex(") ENGINE")]
            cols = [ln.strip().split()[0] for ln in body.splitlines() if ln.strip()]
            tables[created.group(1)] = [c for c in cols if c != "ingested_at"]
        elif added is not None:
            table, column, after = added.groups()
            cols = tables[table]
            cols.insert(cols.index(after) + 1 if after else len(cols), column)
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
    assert seen == set(columns) - {"dead_letters", "pairs"}  # those two: test_dead_letter_row, test_pair_row


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


def _pair(kind: str, rejected: PairSide | None) -> PreferencePair:
    obs = Observation(screenshot=BlobRef(sha256="a" * 64, uri="file:///a"), screen_width=160, screen_height=210,
                      instruction="Click ONE")
    step = Step(episode_id="ep", ts=1.0, step_index=0, started_at=1.0, observation=obs, action=Click(x=0.1, y=0.5),
                policy="pixel", policy_version=3, logprob=-1.0)
    return PreferencePair(episode_id="ep", kind=kind, task=TaskSpec(task_id="t", suite="miniwob", name="click-test", seed=7),
                          tau=0, step_index=int(kind == "post_reflection"), observation=obs,
                          history=[step] if kind == "post_reflection" else [], chosen=PairSide(action=Click(x=0.5, y=0.5)),
                          rejected=rejected, annotator="scripted-v1", policy="pixel", policy_version=3, created_at=2.0)


def test_pair_row():
    pair = _pair("error_correction", PairSide(action=None, raw_output="Action: clack()"))
    row = rows_for("pairs", pair)["pairs"][0]
    assert list(row) == ddl_columns()["pairs"]
    assert row["event_id"] == "ep:error_correction:scripted-v1"
    assert (row["chosen_action_type"], row["rejected_action_type"], row["rejected_raw_output"]) == ("click", "", "Action: clack()")
    assert (row["seed"], row["tau"], row["step_index"], row["task_name"]) == (7, 0, 0, "click-test")
    post = rows_for("pairs", _pair("post_reflection", None))["pairs"][0]
    assert (post["step_index"], post["rejected_action"], post["rejected_raw_output"]) == (1, None, None)


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
