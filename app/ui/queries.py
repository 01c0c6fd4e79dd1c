"""The UI's reads: pure functions from validated inputs to (SQL, bind parameters).

Every statement is checked by ``infra.clickhouse.sql_policy.check`` before it runs (server.py),
and user input only ever travels as a bind parameter, never inside the SQL text. A hostile value
is refused here with ``UiInputError`` (a clear 400), before any query exists.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from app.demo_queries import first_scorer
from trainer.sft.rft import annotator_of

# ids and names the pipeline writes: uuids, task names like "click-button", "human:alice"
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:\-]{0,127}")
_OUTCOMES = {"", "success", "failure"}
MAX_EPISODES = 200


class UiInputError(ValueError):
    """A request parameter the UI will not use; the message says which and why."""


def checked_id(field: str, value: str | None, required: bool = True) -> str:
    """``value`` if it looks like an id or name the pipeline writes, else UiInputError."""
    value = value or ""
    if not value and not required:
        return ""
    if not _ID.fullmatch(value):
        raise UiInputError(f"{field}: {value[:40]!r} is not a valid id (letters, digits, _ . : -; at most 128)")
    return value


def run_where(run: str) -> tuple[str, dict]:
    """(SQL condition, bind parameters) selecting the rows of ``run``: a run is named by the
    policy it trains (``flywheel demo``'s ``<kind>-<run id>``), and its rows are that policy's and
    its scripted annotator's (the cold start's demonstrations). No run: every row."""
    if not run:
        return "1", {}
    return "policy IN ({run:String}, {run_annotator:String})", {"run": run, "run_annotator": annotator_of(run)}


def run_of(policy: str) -> str:
    """The run a policy's rows belong to (``run_where``'s inverse)."""
    prefix = annotator_of("")
    return policy[len(prefix):] if policy.startswith(prefix) and len(policy) > len(prefix) else policy


RUNS_SQL = ("SELECT policy, count() AS episodes, toUnixTimestamp64Milli(min(started_at)) AS first_ms "
            "FROM trajectories FINAL GROUP BY policy")


def runs_of(rows: list[dict]) -> list[dict]:
    """RUNS_SQL's rows per policy -> one row per run ({run, episodes, first_ms}), newest first."""
    runs: dict[str, dict] = {}
    for row in rows:
        name = run_of(row["policy"])
        run = runs.setdefault(name, {"run": name, "episodes": 0, "first_ms": row["first_ms"]})
        run["episodes"] += row["episodes"]
        run["first_ms"] = min(run["first_ms"], row["first_ms"])
    return sorted(runs.values(), key=lambda r: (-r["first_ms"], r["run"]))


@dataclass(frozen=True)
class EpisodeFilter:
    run: str = ""
    task: str = ""
    policy: str = ""
    version: int | None = None
    outcome: str = ""  # "" | "success" | "failure"

    @classmethod
    def parse(cls, params: dict[str, str]) -> "EpisodeFilter":
        version = params.get("version") or ""
        if version and not (version.isascii() and version.isdigit() and len(version) < 10):  # "²".isdigit()
            raise UiInputError(f"version: {version[:40]!r} is not a non-negative integer")
        outcome = params.get("outcome") or ""
        if outcome not in _OUTCOMES:
            raise UiInputError(f"outcome: {outcome[:40]!r} is not one of success, failure")
        return cls(run=checked_id("run", params.get("run"), required=False),
                   task=checked_id("task", params.get("task"), required=False),
                   policy=checked_id("policy", params.get("policy"), required=False),
                   version=int(version) if version else None, outcome=outcome)


def episodes_sql(f: EpisodeFilter) -> tuple[str, dict]:
    run, params = run_where(f.run)
    where = [run]
    if f.task:
        where.append("task_name = {task:String}")
        params["task"] = f.task
    if f.policy:
        where.append("policy = {policy:String}")
        params["policy"] = f.policy
    if f.version is not None:
        where.append("{version:UInt32} BETWEEN policy_version_min AND policy_version_max")
        params["version"] = f.version
    if f.outcome:
        where.append("success = {success:Bool}")
        params["success"] = f.outcome == "success"
    sql = ("SELECT episode_id, task_name, policy, policy_version_min, policy_version_max, num_steps, "
           "outcome_reward, success, end_reason, toUnixTimestamp64Milli(started_at) AS started_ms "
           f"FROM trajectories FINAL WHERE {' AND '.join(where)} ORDER BY started_at DESC LIMIT {MAX_EPISODES}")
    return sql, params


def episode_steps_sql(episode_id: str) -> tuple[str, dict]:
    sql = ("SELECT step_index, action_type, action, thought, reward, done, policy, policy_version, "
           "latency_policy_ms, latency_env_ms, error, instruction, screenshot_sha256, screen_width, screen_height "
           "FROM steps FINAL WHERE episode_id = {episode_id:String} ORDER BY step_index")
    return sql, {"episode_id": checked_id("episode", episode_id)}


def episode_pairs_sql(episode_id: str) -> tuple[str, dict]:
    sql = "SELECT * FROM pairs FINAL WHERE episode_id = {episode_id:String}"
    return sql, {"episode_id": checked_id("episode", episode_id)}


# The Run view: every time axis is minutes since the run's first step. {where} selects the run's
# rows (run_where); dead letters have no policy, so they are every run's.
_START = "(SELECT min(ts) FROM steps WHERE {where})"

_RUN_QUERIES: dict[str, str] = {
    "success_by_task": (
        f"SELECT task_name, intDiv(toUnixTimestamp(scored_at) - toUnixTimestamp({_START}), 60) AS minute, "
        "count() AS episodes, round(avg(success), 4) AS success_rate "
        f"FROM scored FINAL WHERE ({{where}}) AND {first_scorer('{where}')} GROUP BY task_name, minute "
        "ORDER BY task_name, minute"),
    "steps_per_s": (
        f"SELECT intDiv(toUnixTimestamp(ts) - toUnixTimestamp({_START}), 60) AS minute, "
        "round(count() / 60, 3) AS steps_per_s FROM steps FINAL WHERE {where} GROUP BY minute ORDER BY minute"),
    "totals": ("SELECT (SELECT count() FROM steps FINAL WHERE {where}) AS steps, (SELECT count() FROM trajectories "
               "FINAL WHERE {where}) AS episodes, (SELECT count() FROM dead_letters FINAL) AS dead_letters"),
    "staleness": "SELECT policy, staleness, trajectories FROM v_staleness_histogram WHERE {where}",
    "trainer": (
        f"SELECT name, round((toUnixTimestamp(ts) - toUnixTimestamp({_START})) / 60, 2) AS minute, value "
        "FROM v_trainer_metrics WHERE ({where}) AND (name LIKE 'losses/%' OR name = 'perf/idle_fraction') ORDER BY ts"),
    "policy_versions": ("SELECT policy, max(version) AS version, count() AS versions "
                        "FROM policy_versions FINAL WHERE {where} GROUP BY policy ORDER BY policy"),
    "dead_letters": "SELECT stage, error_type, letters FROM v_dead_letters_by_stage",
}


def run_queries(run: str) -> dict[str, tuple[str, dict]]:
    """The Run view's statements for ``run`` ("" for every run): {panel: (SQL, bind parameters)}."""
    where, params = run_where(checked_id("run", run, required=False))
    return {name: (sql.replace("{where}", where), params) for name, sql in _RUN_QUERIES.items()}
