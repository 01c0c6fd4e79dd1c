"""Measuring the main job's phases: the SQL the report and the benchmarks read, and the pure
functions that turn its rows into the report's figures (success per task and phase, PPO's gain over
the starting policy, the critic at PPO's start). Apart from running them (app.phases), so a
benchmark reads a run the way the report does without importing the code that runs one.

The phase of an episode is read from what it was acted by (``phase_sql``), so the report's
per-phase table needs no clock.
"""

from __future__ import annotations

import logging
import math
import statistics
from typing import Protocol

from app import demo_queries as Q
from app.taught import Taught, line, phase_heading, rl_label
from trainer.core import metric_names as M
from trainer.sft.rft import annotator_of

log = logging.getLogger("flywheel.measures")


class Spans(Protocol):
    """The phases' wall-clock (app.phases.PhaseClock): one dict per phase."""

    def rows(self) -> list[dict]: ...


MEASURE = Q.MEASURE  # an episode's measure: a game's normalised score, else its success


def phase_sql(policy: str, base_version: int, cold_start: bool, value_pretrain: bool,
              dpo_version: int | None = None) -> str:
    """Success per task and phase over every ended episode of the run (demonstrations included;
    a game's episode counts its normalised score, 0 = random, 1 = the heuristic, not its success),
    the phase read from the policy that acted: the scripted annotator, the version the trainer
    started from (pi_sft or the random init; during value pretraining or before the first
    update), PPO's, or (from ``dpo_version`` on) DPO's."""
    # a constant label: no input reaches it
    start = ("2 pi_sft" if cold_start else "2 random init") + (" (value pretraining)" if value_pretrain else "")
    dpo = f"policy_version_min >= {int(dpo_version)}, '4 DPO (from pi_sft)', " if dpo_version is not None else ""
    policies = f"{Q.q(policy)}, {Q.q(annotator_of(policy))}"
    return f"""SELECT task_name, phase, count() AS episodes, round(avg(measure), 4) AS success_or_score,
    round(avg(num_steps), 2) AS mean_steps, varSamp(measure) AS measure_var
FROM (
    SELECT task_name, num_steps, {MEASURE} AS measure,
        multiIf(policy = {Q.q(annotator_of(policy))}, '1 demonstrations (scripted)',
                policy_version_min <= {int(base_version)}, '{start}', {dpo}'3 PPO') AS phase
    FROM (SELECT episode_id, task_name, success, num_steps, policy, policy_version_min FROM scored FINAL
          WHERE policy IN ({policies}) AND NOT infra_failure AND {Q.own_scorer(policy, annotator_of(policy))}) AS s
    LEFT JOIN (SELECT episode_id, normalised_score FROM trajectories FINAL WHERE policy IN ({policies})) AS t
        USING (episode_id)
)
GROUP BY task_name, phase ORDER BY task_name, phase"""


LAST = 100  # the "each task's last 100 episodes"
LAST_PHASE = f"3 PPO, last {LAST}"


def ppo_episodes(policy: str, base_version: int, dpo_version: int | None, columns: str) -> str:
    """The FROM of ``last_sql`` and ``by_update_sql``: the run's PPO episodes (acted by versions past
    ``base_version``, before ``dpo_version``; scored by the run's own scorer, no infrastructure
    failure) with their ``columns`` beside episode_id, task_name and success, joined to their
    normalised score (``MEASURE`` reads both)."""
    dpo = f" AND policy_version_min < {int(dpo_version)}" if dpo_version is not None else ""
    return f"""(SELECT episode_id, task_name, success, {columns} FROM scored FINAL
          WHERE policy = {Q.q(policy)} AND NOT infra_failure AND {Q.own_scorer(policy)}
              AND policy_version_min > {int(base_version)}{dpo}) AS s
    LEFT JOIN (SELECT episode_id, normalised_score FROM trajectories FINAL WHERE policy = {Q.q(policy)}) AS t
        USING (episode_id)"""


def last_sql(policy: str, base_version: int, dpo_version: int | None = None) -> str:
    """``phase_sql``'s rows for one more phase: each task's last LAST episodes of PPO (or as many as
    it had), by when they ended; so a gain can be read at the run's end, not over the whole phase."""
    return f"""SELECT task_name, '{LAST_PHASE}' AS phase, count() AS episodes, round(avg(measure), 4) AS success_or_score,
    round(avg(num_steps), 2) AS mean_steps, varSamp(measure) AS measure_var
FROM (
    SELECT task_name, num_steps, {MEASURE} AS measure,
        row_number() OVER (PARTITION BY task_name ORDER BY ended_at DESC, episode_id) AS k
    FROM {ppo_episodes(policy, base_version, dpo_version, "num_steps, ended_at")}
)
WHERE k <= {LAST}
GROUP BY task_name ORDER BY task_name"""



def by_update_sql(policy: str, base_version: int, dpo_version: int | None = None) -> str:
    """Each task's PPO episodes (``last_sql``'s) grouped by the PPO update of the newest version
    that acted in them (``policy_version_max`` less the starting version): how many, and the sum of
    their measure. ``last_at_update`` reads them at a given update, so runs that reached different
    numbers of updates in the same wall-clock can be compared at the same one."""
    return f"""SELECT task_name, toInt64(policy_version_max) - {int(base_version)} AS updates, count() AS episodes,
    sum(measure) AS total
FROM (
    SELECT task_name, policy_version_max, {MEASURE} AS measure
    FROM {ppo_episodes(policy, base_version, dpo_version, "policy_version_max")}
)
GROUP BY task_name, updates ORDER BY task_name, updates"""


def by_update(rows: list[tuple]) -> dict[str, list[list]]:
    """``by_update_sql``'s rows as {task: [[update, episodes, sum of the measure], ...]} by update."""
    out: dict[str, list[list]] = {}
    for task, update, n, total in sorted(rows, key=lambda r: (r[0], int(r[1]))):
        out.setdefault(task, []).append([int(update), int(n), float(total)])
    return out


def last_at_update(buckets: dict[str, list[list]], update: int, last: int = LAST) -> float | None:
    """The mean over tasks of each task's last ``last`` PPO episodes among those acted by versions
    up to ``update`` (or as many as it had): whole updates from ``update`` down, and of the update
    where ``last`` is crossed its mean for the rest. Episodes are ordered by update, not by when they
    ended (within one update the order is not kept). None when a task has no episode up to it."""
    means = []
    for rows in buckets.values():
        n_taken, total = 0, 0.0
        for u, n, s in sorted((r for r in rows if r[0] <= update), key=lambda r: -r[0]):
            take = min(n, last - n_taken)
            total += s * take / n
            n_taken += take
            if n_taken >= last:
                break
        if not n_taken:
            return None
        means.append(total / n_taken)
    return statistics.mean(means) if means else None

def pivot(rows: list[tuple]) -> tuple[list[str], list[list[str]]]:
    """(task, phase, episodes, success, ...) rows -> a task x phase table of 'success (episodes)'."""
    phases = sorted({r[1] for r in rows})
    by_task: dict[str, dict[str, str]] = {}
    for task, phase, n, rate, *_ in rows:
        by_task.setdefault(task, {})[phase] = f"{float(rate):.2f} ({n})"
    return ["task", *phases], [[t, *(cells.get(p, "-") for p in phases)] for t, cells in sorted(by_task.items())]


def mean_se(values: list[float]) -> tuple[float, float | None] | None:
    """Mean of independent units (seeds, or tasks taken as a sample of tasks) and the standard error
    of that mean from their spread (sample standard deviation / sqrt(n)); the SE is None for one
    unit, the whole None for none. The estimator for gains over seeds and over tasks; the spread
    within a run (episodes of fixed tasks) is ``phase_gain``'s."""
    xs = [float(v) for v in values]
    if not xs:
        return None
    return statistics.mean(xs), (statistics.stdev(xs) / len(xs) ** 0.5 if len(xs) > 1 else None)


def mean_se_text(values: list, sign: bool = True) -> str:
    """``mean_se`` of the values that are not None as "+0.123 ± 0.045" ("(1 seed)" for one, "-" for none)."""
    got = mean_se([v for v in values if v is not None])
    if got is None:
        return "-"
    fmt = "+.3f" if sign else ".3f"
    return f"{got[0]:{fmt}} (1 seed)" if got[1] is None else f"{got[0]:{fmt}} ± {got[1]:.3f}"


def phase_gain(rows: list[tuple], before: str, after: str) -> tuple[float, float, int] | None:
    """The suite's gain from phase ``before`` to phase ``after`` (``phase_sql``'s rows): the mean over
    the tasks played in both of each task's difference in its measure (success, a game's
    normalised score), with its standard error (tasks independent; each phase's mean's variance
    from the row's sample variance when it has one, else as a binomial proportion's), and the
    number of tasks; None when no task was played in both. Per task, so a phase's task mix (the
    curriculum's) does not enter it. This SE is the episodes' sampling error with the tasks fixed
    (one run); across seeds or across tasks taken as a sample, ``mean_se``'s."""
    rate = {(r[0], r[1]): (float(r[3]), int(r[2]), _sample_var(r)) for r in rows}
    tasks = sorted(t for t, ph in rate if ph == before and (t, after) in rate)
    if not tasks:
        return None
    diffs, var = [], 0.0
    for t in tasks:
        (p0, n0, v0), (p1, n1, v1) = rate[(t, before)], rate[(t, after)]
        diffs.append(p1 - p0)
        var += (p0 * (1 - p0) if v0 is None else v0) / max(n0, 1) + (p1 * (1 - p1) if v1 is None else v1) / max(n1, 1)
    return sum(diffs) / len(tasks), var ** 0.5 / len(tasks), len(tasks)


def run_gains(rows: list[tuple], last_rows: list[tuple]) -> tuple[tuple | None, tuple | None]:
    """PPO's gain over the starting policy's episodes (``phase_sql``'s rows): over the whole PPO
    phase, and over each task's last LAST episodes (``last_sql``'s rows); None where either phase
    is missing."""
    start = next((r[1] for r in sorted(rows) if str(r[1]).startswith("2 ")), None)
    if start is None:
        return None, None
    return phase_gain(rows, start, "3 PPO"), phase_gain(list(rows) + list(last_rows), start, LAST_PHASE)


def _sample_var(row: tuple) -> float | None:
    """``phase_sql``'s sample variance of the row's measure (0 for one episode); None for a row without it."""
    if len(row) < 6 or row[5] is None:
        return None
    v = float(row[5])
    return v if math.isfinite(v) else 0.0  # one episode: NaN (chDB) or inf (some servers)



PPO_START_BATCHES = 3  # the critic check pooled over PPO's first batches (a game's batch may hold 2 episodes)


def value_pretraining_summary(trainer_rows: list[tuple], batches: int = PPO_START_BATCHES) -> dict[str, float | int | None]:
    """From the run's TrainerMetrics rows (update, version, t, metrics): how many critic-only
    batches ran, the critic's explained variance at the last of them, and the critic at PPO's
    start (UI-TARS-2's failure signature is a negative value-return correlation): at the first
    PPO batch, and pooled over the first ``batches``. "PPO batch" here is one with a correlation:
    a batch of one episode, or of equal returns, has none (nothing non-finite is recorded).

    The correlation is over the batch's episodes (each one's first value against its return), so
    a batch of two long game episodes has one of +-1 whatever the critic: the pooled figure
    weighs each batch's by its episodes less two (a batch of two counts for nothing; None when
    none counts). The explained variance is over the batch's steps: weighed by its steps. Runs
    recorded without those counts get plain means. The same two pooled over every PPO update
    (``..._ppo_phase``; the explained variance over those without a correlation too) say how
    good the critic was while it steered the policy."""
    rows = [(r[0], {M.current(k): v for k, v in (r[3] or {}).items()}) for r in trainer_rows]
    critic = [m for _, m in rows if m.get(M.CRITIC_ONLY) == 1]
    updates = [m for _, m in rows if m.get(M.CRITIC_ONLY) == 0]
    ppo = [m for m in updates if M.REWARD_CORR in m]
    first = ppo[:max(1, batches)]
    counted = bool(first) and all(M.EPISODES in m for m in first)
    corr, ev = _pooled_corr(first), _pooled_ev(first)
    return {"critic_only_batches": len(critic),
            "explained_variance_at_end": critic[-1].get(M.EXPLAINED_VARIANCE) if critic else None,
            "value_return_corr_at_ppo_start": ppo[0].get(M.REWARD_CORR) if ppo else None,
            "explained_variance_at_ppo_start": ppo[0].get(M.EXPLAINED_VARIANCE) if ppo else None,
            "episodes_at_ppo_start": first[0].get(M.EPISODES) if first else None,
            "ppo_start_batches": len(first),
            "ppo_start_episodes": sum(m[M.EPISODES] for m in first) if counted else None,
            "value_return_corr_ppo_start_pooled": corr,
            "explained_variance_ppo_start_pooled": ev,
            "ppo_updates": len(updates),
            "value_return_corr_ppo_phase": _pooled_corr(ppo), "explained_variance_ppo_phase": _pooled_ev(updates)}


def _pooled_corr(batches: list[dict]) -> float | None:
    """The batches' value-return correlation weighed by each one's episodes less two (plain mean
    where a batch has no count)."""
    counted = bool(batches) and all(M.EPISODES in m for m in batches)
    return _weighted([(m[M.REWARD_CORR], max(m[M.EPISODES] - 2, 0) if counted else 1.0) for m in batches])


def _pooled_ev(batches: list[dict]) -> float | None:
    """The batches' explained variance weighed by each one's steps."""
    return _weighted([(m[M.EXPLAINED_VARIANCE], m.get(M.STEPS, 1.0)) for m in batches if M.EXPLAINED_VARIANCE in m])


def _weighted(pairs: list[tuple[float, float]]) -> float | None:
    """The weighted mean of (value, weight) pairs; None when the weights add up to nothing."""
    total = sum(w for _, w in pairs)
    return sum(v * w for v, w in pairs) / total if total > 0 else None


def critic_sentence(vp: dict) -> str:
    """The report's line on value pretraining and the critic at PPO's start (value_pretraining_summary):
    the verdict on the correlation is the pooled one's where there is one (a first batch of two
    episodes says +-1 whatever the critic)."""
    fmt = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
    of = lambda n: "" if n is None else f" ({int(n)} episodes)"  # noqa: E731
    pooled = vp["ppo_start_batches"] > 1 and vp["value_return_corr_ppo_start_pooled"] is not None
    first = vp["value_return_corr_at_ppo_start"]
    said = (f"Value pretraining: {vp['critic_only_batches']} critic-only batches, explained variance at their end "
            f"{fmt(vp['explained_variance_at_end'])}; at PPO's first batch{of(vp['episodes_at_ppo_start'])} the "
            f"critic's explained variance was {fmt(vp['explained_variance_at_ppo_start'])} and the value-return "
            f"correlation {fmt(first)}{'' if pooled else corr_verdict(first)}")
    if vp["ppo_start_batches"] > 1:
        said += (f"; over PPO's first {vp['ppo_start_batches']} batches{of(vp['ppo_start_episodes'])} "
                 f"{fmt(vp['explained_variance_ppo_start_pooled'])} and "
                 f"{fmt(vp['value_return_corr_ppo_start_pooled'])}"
                 f"{corr_verdict(vp['value_return_corr_ppo_start_pooled'])} (the explained variance weighed by "
                 "each batch's steps, the correlation by its episodes less two: a batch of two has one of ±1 "
                 "whatever the critic)")
    if vp.get("ppo_updates", 0) > vp["ppo_start_batches"]:  # the whole phase says more than its first batches
        said += (f". Over all {vp['ppo_updates']} PPO updates, pooled alike: {fmt(vp['explained_variance_ppo_phase'])} "
                 f"and {fmt(vp['value_return_corr_ppo_phase'])} (the explained variance is against the critic's own "
                 "targets, its lambda_critic-returns)")
    return said + "."


def corr_verdict(corr: float | None) -> str:
    """What the value-return correlation at PPO's start says (UI-TARS-2's failure signature is a
    negative one); empty when it was not measured."""
    if corr is None:
        return ""
    if corr < 0:
        return " (negative: UI-TARS-2's failure signature, the critic misleads the policy)"
    return " (positive: the critic ranks states the way the returns do)"


def report_section(settings, policy: str, base_version: int, cold_start: bool, value_pretrain: bool,
                   clock: Spans, dpo_version: int | None = None, taught: Taught | None = None) -> tuple[list[str], dict]:
    """Markdown of the phases (time, success per task and phase, value pretraining) and its data;
    with ``taught`` (what taught the run), the table's headings and the gains name it."""
    # local: loads clickhouse-connect, needed only on this path
    from infra.clickhouse.query import execute, render

    sql = phase_sql(policy, base_version, cold_start, value_pretrain, dpo_version)
    _, rows, _ = execute(settings, sql)
    cols, table = pivot(rows)
    _, trainer_rows, _ = execute(settings, Q.trainer_metrics(policy))
    vp = value_pretraining_summary(trainer_rows)
    shown = [cols[0], *(phase_heading(c, taught) for c in cols[1:])] if taught else cols
    lines = ["## Phases", "", *([line(taught), ""] if taught else []), "| phase | minutes | what |", "|---|---|---|"]
    lines += [f"| {r['phase']} | {r['seconds'] / 60:.1f} | {r['detail']} |" for r in clock.rows()]
    lines += ["", "Success rate (episodes) per task and phase, every ended episode of the phase "
              "(sampled actions; the demonstrations are the scripted annotator's; a game's cell is its mean "
              "normalised score, 0 = the random policy, 1 = the heuristic):", "",
              "```", render(shown, table, "table") if table else "(no rows)", "```", "",
              critic_sentence(vp), "",
              "<details><summary>SQL</summary>", "", "```sql", sql, "```", "</details>", ""]
    last = last_sql(policy, base_version, dpo_version)
    try:
        _, last_rows, _ = execute(settings, last)
    except Exception as exc:  # noqa: BLE001 - the phase table above stands without it
        last_rows = []
        log.warning("each task's last %d PPO episodes not read: %s", LAST, exc)
    gain, gain_last = run_gains(rows, last_rows)
    said = []
    if gain is not None:
        said += [f"PPO's gain over the starting policy's episodes: {gain[0]:+.3f} ± {gain[1]:.3f} (standard error; the "
                 f"mean over the {gain[2]} tasks played in both phases of each task's difference in success, a game's in "
                 f"normalised score; " + (f"the PPO phase is the {rl_label(taught)}" if taught else
                                          "the PPO phase's updates include the RFT and DAgger rounds the run's plan names")
                 + ")", ""]
    if gain_last is not None:
        said += [f"At the run's end, each task's last {LAST} PPO episodes (or as many as it had: "
                 f"{', '.join(f'{r[0]} {r[2]}' for r in last_rows)}) over the starting policy's: {gain_last[0]:+.3f} ± "
                 f"{gain_last[1]:.3f}, the same mean over tasks", ""]
    at = lines.index("<details><summary>SQL</summary>")
    lines[at:at] = said
    lines[-3:-3] = ["```", "", "```sql", last]  # a block of its own in the SQL details
    by_phase = {t[0]: dict(zip(cols[1:], t[1:])) for t in table}
    as_dict = lambda g: None if g is None else {"gain": g[0], "standard_error": g[1], "tasks": g[2]}  # noqa: E731
    return lines, {"phases": clock.rows(), "success_by_task_and_phase": by_phase, "value_pretraining": vp,
                   "base_version": base_version, "dpo_version": dpo_version, "ppo_gain": as_dict(gain), "ppo_gain_last_100": as_dict(gain_last)}
