"""The Disagreements view: the episodes where a learned verifier and the page disagree.

A task the verifier decides (the streams' ``--judge-tasks``) is scored with a ``judge_outcome``
component, and its V(s) (``scored.verdict``) follows the verifier, while ``scored.success`` stays
the page's own verdict (streams.score). So over the scored rows holding ``judge_outcome`` the two
form a confusion table with the page as the truth: a false positive (the verifier said success,
the page failure) is the reward hacking to look for, a false negative the reverse. V(s) is also 0
for a verifier's success with too many anomalous steps, so a false negative may be the anomaly
filter's doing: each row carries its count of anomalies to tell.

Pure: validated inputs to (SQL, bind parameters), and rows to the view's JSON. User input only
travels as bind parameters (queries.run_where, ``{task:String}``).
"""

from __future__ import annotations

from dataclasses import dataclass

from app.ui.queries import MAX_EPISODES, UiInputError, checked_id, run_where

# the scored rows a verifier decided: ended episodes whose outcome component is the verifier's
JUDGED = "status = 'ended' AND mapContains(components, 'judge_outcome')"
KINDS = {
    "": "verdict != toUInt8(success)",  # both directions
    "false_positive": "verdict = 1 AND NOT success",  # the verifier said success, the page failure
    "false_negative": "verdict = 0 AND success",  # the page said success, the verifier (or anomalies) failure
}


@dataclass(frozen=True)
class DisagreementFilter:
    run: str = ""
    task: str = ""
    kind: str = ""  # one of KINDS

    @classmethod
    def parse(cls, params: dict[str, str]) -> "DisagreementFilter":
        kind = params.get("kind") or ""
        if kind not in KINDS:
            raise UiInputError(f"kind: {kind[:40]!r} is not one of false_positive, false_negative")
        return cls(run=checked_id("run", params.get("run"), required=False),
                   task=checked_id("task", params.get("task"), required=False), kind=kind)


def confusion_sql(f: DisagreementFilter) -> tuple[str, dict]:
    """Per task, the verifier's confusion table against the page over the run's judged episodes
    (every task: the counts are the context of the episodes listed)."""
    where, params = run_where(f.run)
    sql = ("SELECT task_name, countIf(verdict = 1 AND success) AS tp, "
           "countIf(verdict = 1 AND NOT success) AS fp, countIf(verdict = 0 AND NOT success) AS tn, "
           "countIf(verdict = 0 AND success) AS fn "
           f"FROM scored FINAL WHERE ({where}) AND {JUDGED} GROUP BY task_name ORDER BY task_name")
    return sql, params


def episodes_sql(f: DisagreementFilter) -> tuple[str, dict]:
    """The disagreeing episodes (one row per scorer that judged one), newest first."""
    where, params = run_where(f.run)
    conditions = [f"({where})", JUDGED, f"({KINDS[f.kind]})"]
    if f.task:
        conditions.append("task_name = {task:String}")
        params["task"] = f.task
    sql = ("SELECT episode_id, task_name, policy, policy_version_max AS version, num_steps, "
           "success AS page_success, verdict AS verifier_success, "
           "round(components['judge_outcome'], 4) AS judge_outcome, round(reward, 4) AS reward, "
           "length(anomalies) AS anomalies, scorer, scorer_version, toUnixTimestamp64Milli(scored_at) AS scored_ms "
           f"FROM scored FINAL WHERE {' AND '.join(conditions)} ORDER BY scored_at DESC, episode_id "
           f"LIMIT {MAX_EPISODES}")
    return sql, params


def _rate(num: int, den: int) -> float | None:
    return round(num / den, 4) if den else None


def confusion_row(row: dict) -> dict:
    """A confusion row with its false-positive rate fp/(fp+tn) and recall tp/(tp+fn) (None with
    no page failure, or no page success, to divide by): the terms `flywheel verifier eval` uses."""
    tp, fp, tn, fn = (int(row[k]) for k in ("tp", "fp", "tn", "fn"))
    return {"task_name": row["task_name"], "judged": tp + fp + tn + fn, "tp": tp, "fp": fp, "tn": tn, "fn": fn,
            "false_positive_rate": _rate(fp, fp + tn), "recall": _rate(tp, tp + fn)}


def view(confusion: list[dict], episodes: list[dict]) -> dict:
    """The view's JSON: per task and in all, the confusion table; the disagreeing episodes (at
    most ``MAX_EPISODES``, ``truncated`` when there may be more); ``verifier_used`` false when
    no episode of the run was decided by a verifier (the page then says so)."""
    tasks = [confusion_row(r) for r in confusion]
    total = confusion_row({"task_name": "ALL", **{k: sum(t[k] for t in tasks) for k in ("tp", "fp", "tn", "fn")}})
    return {"verifier_used": bool(tasks), "tasks": tasks, "total": total,
            "episodes": [{**e, "page_success": bool(e["page_success"]), "verifier_success": bool(e["verifier_success"])}
                         for e in episodes],
            "truncated": len(episodes) >= MAX_EPISODES}
