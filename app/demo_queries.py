"""The SQL the demo's progress view and report run, kept in one place so the report can print
exactly the query that computed each figure. Every query filters on one policy name (a demo run
trains its own policy) and reads tables with FINAL so replays count once."""

from __future__ import annotations

import re

_SAFE = re.compile(r"^[A-Za-z0-9_.:\-]+$")
# an episode's measure: a game's normalised score (the trajectories row), else its success
MEASURE = "if(isNull(normalised_score), toFloat64(success), assumeNotNull(normalised_score))"


def q(value: str) -> str:
    """Quote an identifier-like value for a SQL literal; refuse anything unexpected."""
    if not _SAFE.match(value):
        raise ValueError(f"unsafe value for a query: {value!r}")
    return f"'{value}'"


def last_n_success(policy: str, n: int = 100, steps: bool = False) -> str:
    """Success over the last ``n`` ended episodes of each task (infrastructure aborts excluded:
    they say nothing about the policy); ``steps`` adds their mean length, a fourth column
    ``mean_steps`` (the curriculum shares the RL steps by it)."""
    mean_steps, num_steps = (", round(avg(num_steps), 2) AS mean_steps", " num_steps,") if steps else ("", "")
    return f"""SELECT task_name, count() AS episodes, round(avg(success), 4) AS success_rate{mean_steps}
FROM (
    SELECT task_name, success,{num_steps} ended_at FROM trajectories FINAL
    WHERE policy = {q(policy)} AND status = 'ended'
    ORDER BY ended_at DESC LIMIT {int(n)} BY task_name
)
GROUP BY task_name ORDER BY task_name"""


def last_n_scores(policy: str, n: int = 100, first: bool = False) -> str:
    """A game's mean normalised score over its last (``first``: first) ``n`` ended episodes (games
    only: the other tasks have no score): the progress figure of a game, where success means
    reaching the reference."""
    return f"""SELECT task_name, count() AS episodes, round(avg(normalised_score), 4) AS normalised_score
FROM (
    SELECT task_name, normalised_score, ended_at FROM trajectories FINAL
    WHERE policy = {q(policy)} AND status = 'ended' AND normalised_score IS NOT NULL
    ORDER BY ended_at {'ASC' if first else 'DESC'} LIMIT {int(n)} BY task_name
)
GROUP BY task_name ORDER BY task_name"""


def first_n_success(policy: str, n: int = 100) -> str:
    """Success over the first ``n`` ended episodes of each task: the 'before' figure."""
    return f"""SELECT task_name, count() AS episodes, round(avg(success), 4) AS success_rate
FROM (
    SELECT task_name, success, ended_at FROM trajectories FINAL
    WHERE policy = {q(policy)} AND status = 'ended'
    ORDER BY ended_at ASC LIMIT {int(n)} BY task_name
)
GROUP BY task_name ORDER BY task_name"""


def totals(policy: str) -> str:
    """Episodes per task, and how the ended ones ended: the task said done, the step budget ran
    out, or the wall-clock limit did (a clock-cut episode's score depends on the machine's load)."""
    return f"""SELECT task_name, count() AS episodes, countIf(status = 'aborted') AS aborted,
    round(avg(success), 4) AS success_rate, sum(num_steps) AS steps,
    countIf(status = 'ended' AND end_reason = 'done') AS ended_done,
    countIf(status = 'ended' AND end_reason = 'step_budget') AS out_of_steps,
    countIf(status = 'ended' AND end_reason = 'timeout') AS out_of_time
FROM trajectories FINAL WHERE policy = {q(policy)}
GROUP BY task_name ORDER BY task_name"""


def latest_versions(policy: str, topic_prefix: str = "") -> str:
    """Newest version published by the trainer, newest version seen on a step (hot reload), the
    trainer's updates, and the dead letters of the run's own topics (``topic_prefix``; all of them
    without one: an earlier run's letters in the same ClickHouse are not this run's)."""
    dead = f" WHERE startsWith(source_topic, {q(topic_prefix)})" if topic_prefix else ""
    return f"""SELECT
    (SELECT max(version) FROM policy_versions FINAL WHERE policy = {q(policy)}) AS published,
    (SELECT max(policy_version) FROM steps WHERE policy = {q(policy)}) AS acting,
    (SELECT count() FROM trainer_metrics FINAL WHERE policy = {q(policy)}) AS updates,
    (SELECT count() FROM dead_letters FINAL{dead}) AS dead_letters"""


def first_scorer(where: str) -> str:
    """A condition on ``scored``: each episode's row from the scorer that scored it first (a run's
    own stream processors), among the rows ``where`` selects. A `flywheel rescore` by another
    scorer or version adds a row per episode beside it; this leaves those out, so no episode
    counts twice, while an episode only a newer scorer saw (streams upgraded mid-run) stays. First
    by ``scored_at``, which a replayed record keeps (``ingested_at`` moves on). The view
    ``v_staleness_histogram`` keeps the same row per episode."""
    return ("(episode_id, scorer, scorer_version) IN (SELECT episode_id, s.1, s.2 FROM (SELECT episode_id, "
            f"argMin((scorer, scorer_version), scored_at) AS s FROM scored WHERE {where} GROUP BY episode_id))")


def own_scorer(*policies: str) -> str:
    """``first_scorer`` of the named policies."""
    return first_scorer(f"policy IN ({', '.join(q(p) for p in policies)})")


def success_by_version(policy: str) -> str:
    return f"""SELECT task_name, policy_version_min AS policy_version, count() AS episodes,
    round(avg(success), 4) AS success_rate, round(avg(reward), 4) AS mean_reward,
    round(avg(num_steps), 3) AS mean_steps
FROM scored FINAL WHERE policy = {q(policy)} AND NOT infra_failure AND {own_scorer(policy)}
GROUP BY task_name, policy_version ORDER BY task_name, policy_version"""


def _minute(column: str, bucket_s: int, t0: float) -> str:
    """The start of ``column``'s ``bucket_s`` bucket in minutes since ``t0`` (unix seconds)."""
    return (f"round((toUnixTimestamp(toStartOfInterval({column}, INTERVAL {int(bucket_s)} SECOND)) - {float(t0)!r}) / 60, 2)")


def success_over_time(policy: str, bucket_s: int = 30, t0: float = 0.0) -> str:
    """The learning curve: per task, in ``bucket_s`` buckets of end time keyed by minutes since
    ``t0``, the mean of each episode's ``MEASURE`` (a game's normalised score, whose success is
    only reaching the heuristic's mean; else its success) and which of the two it was."""
    return f"""SELECT task_name, {_minute("ended_at", bucket_s, t0)} AS minute,
    count() AS episodes, round(avg({MEASURE}), 4) AS success_or_score,
    if(count(normalised_score) > 0, 'normalised score', 'success') AS measure
FROM trajectories FINAL WHERE policy = {q(policy)} AND status = 'ended'
GROUP BY task_name, minute ORDER BY task_name, minute"""


def suite_mean_over_time(policy: str, t0: float, step_s: int, points: int, n: int = 100) -> str:
    """The demo's headline figure as it stood every ``step_s`` seconds after ``t0`` (``points``
    times): the mean over tasks of each task's success over its last ``n`` episodes ended by
    then, with how many tasks had episodes and the fewest episodes any of them had."""
    step = max(1, int(step_s))
    return f"""SELECT at_s, round(avg(rate), 4) AS suite_mean, count() AS tasks, min(episodes) AS fewest_episodes
FROM (
    SELECT at_s, task_name, avg(success) AS rate, count() AS episodes
    FROM (
        SELECT at_s, task_name, success, ended_at
        FROM (  -- FINAL first: replayed rows merged before the moments multiply them
            SELECT task_name, toFloat64(success) AS success, ended_at FROM trajectories FINAL
            WHERE policy = {q(policy)} AND status = 'ended'
        ) ARRAY JOIN range({step}, {step * int(points) + 1}, {step}) AS at_s
        WHERE toUnixTimestamp64Milli(ended_at) / 1000 <= {float(t0)!r} + at_s
        ORDER BY ended_at DESC LIMIT {int(n)} BY at_s, task_name
    )
    GROUP BY at_s, task_name
)
GROUP BY at_s ORDER BY at_s"""


def game_scores_over_time(policy: str, bucket_s: int = 30, t0: float = 0.0) -> str:
    """Per game (producers.games) and ``bucket_s`` bucket of end time, keyed by minutes since
    ``t0``: episodes, mean final score and mean normalised score (0 = the random policy's mean,
    1 = the scripted heuristic's), as the analysts' view v_game_scores counts them; no rows for a
    run without games."""
    return f"""SELECT task_name AS game, {_minute("ended_at", bucket_s, t0)} AS minute, count() AS episodes,
    round(avg(score), 2) AS mean_score, round(avg(normalised_score), 4) AS mean_normalised_score
FROM trajectories FINAL
WHERE policy = {q(policy)} AND suite = 'games' AND score IS NOT NULL AND NOT infra_failure
GROUP BY game, minute ORDER BY game, minute"""


def throughput(policy: str, bucket_s: int = 30, t0: float = 0.0) -> str:
    """Steps and episodes per ``bucket_s`` bucket, keyed by minutes since ``t0``."""
    return f"""SELECT {_minute("ts", bucket_s, t0)} AS minute,
    count() AS steps, uniqExact(episode_id) AS episodes
FROM steps FINAL WHERE policy = {q(policy)} GROUP BY minute ORDER BY minute"""


def staleness(policy: str) -> str:
    return f"""SELECT staleness, trajectories, rl_eligible FROM v_staleness_histogram
WHERE policy = {q(policy)} ORDER BY staleness"""


def trainer_metrics(policy: str) -> str:
    return f"""SELECT update, policy_version, toUnixTimestamp(ts) AS t, metrics
FROM trainer_metrics FINAL WHERE policy = {q(policy)} ORDER BY update"""


def first_success_time(policy: str, task: str, target: float, n: int = 100) -> str:
    """Seconds from the first episode to the first moment the last ``n`` episodes of ``task``
    reached ``target`` success (a window over episodes ordered by end time); -1 if never."""
    return f"""SELECT if(count() = 0, -1, min(t) - (SELECT toUnixTimestamp64Milli(min(started_at)) / 1000
                     FROM trajectories FINAL WHERE policy = {q(policy)})) AS seconds
FROM (
    SELECT toUnixTimestamp64Milli(ended_at) / 1000 AS t,
        avg(toFloat64(success)) OVER (ORDER BY ended_at ROWS BETWEEN {int(n) - 1} PRECEDING AND CURRENT ROW) AS rate,
        row_number() OVER (ORDER BY ended_at) AS k
    FROM trajectories FINAL
    WHERE policy = {q(policy)} AND task_name = {q(task)} AND status = 'ended'
)
WHERE k >= {int(n)} AND rate >= {float(target)}"""


def step_latency(policy: str) -> str:
    """Where a step's wall-clock went, over every step of ``policy``: the policy (its batch's wait
    included), the environment, the rest of the step, and the gap to the episode's next step."""
    return f"""SELECT count() AS steps,
    round(quantile(0.5)(latency_policy_ms)) AS policy_p50_ms, round(quantile(0.9)(latency_policy_ms)) AS policy_p90_ms,
    round(quantile(0.5)(latency_env_ms)) AS env_p50_ms, round(quantile(0.9)(latency_env_ms)) AS env_p90_ms,
    round(avg(latency_policy_ms)) AS policy_mean_ms, round(avg(latency_env_ms)) AS env_mean_ms,
    round(avg(step_ms - latency_policy_ms - latency_env_ms)) AS rest_of_step_mean_ms,
    round(avgIf(gap_ms, step_index > 0)) AS between_steps_mean_ms
FROM (
    SELECT step_index, latency_policy_ms, latency_env_ms,
        toUnixTimestamp64Milli(ts) - toUnixTimestamp64Milli(started_at) AS step_ms,
        toUnixTimestamp64Milli(started_at) - lagInFrame(toUnixTimestamp64Milli(ts)) OVER (
            PARTITION BY episode_id ORDER BY step_index ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) AS gap_ms
    FROM steps FINAL WHERE policy = {q(policy)}
)"""


def step_cost_by_task(policy: str) -> str:
    """Per task of ``policy``, what its environment steps cost (issue 57: a step should cost the
    same on every task): the env latency's quantiles, clicks' alone, the policy's p50, and the
    task's env p50 over the pooled one of every task (1: an average task). Steps of an episode with
    no trajectory yet (in flight at the report) are left out."""
    return f"""SELECT t.task_name AS task, count() AS steps,
    round(quantile(0.5)(s.latency_env_ms)) AS env_p50_ms, round(quantile(0.9)(s.latency_env_ms)) AS env_p90_ms,
    round(quantileIf(0.5)(s.latency_env_ms, s.action_type = 'click')) AS env_p50_clicks_ms,
    round(quantile(0.5)(s.latency_policy_ms)) AS policy_p50_ms,
    round(quantile(0.5)(s.latency_env_ms) / any(pooled.p50), 2) AS env_p50_over_all_tasks
FROM steps AS s FINAL
INNER JOIN (SELECT episode_id, any(task_name) AS task_name FROM trajectories FINAL
            WHERE policy = {q(policy)} GROUP BY episode_id) AS t ON s.episode_id = t.episode_id
CROSS JOIN (SELECT quantile(0.5)(st.latency_env_ms) AS p50 FROM steps AS st FINAL
            WHERE st.policy = {q(policy)} AND st.episode_id IN (SELECT episode_id FROM trajectories WHERE policy = {q(policy)})) AS pooled
WHERE s.policy = {q(policy)}
GROUP BY task ORDER BY env_p50_ms DESC, task"""


def game_phases(policy: str, annotator: str, split: int = 10) -> str:
    """Per game and phase, the normalised score's mean and standard error and the mean length of
    the ended episodes: the annotator's demonstrations, pi_sft (v0), PPO v1-``split`` and PPO after
    (by the oldest version that acted in the episode, ``scored.policy_version_min``; one row per
    episode, its first scorer's: a rescore does not count it twice), infrastructure failures left
    out."""
    return f"""SELECT t.task_name AS game,
    if(t.policy = {q(annotator)}, '0 demonstrations', if(s.policy_version_min = 0, '1 pi_sft (v0)',
       if(s.policy_version_min <= {int(split)}, '2 PPO v1-{int(split)}', '3 PPO v{int(split) + 1}+'))) AS phase,
    count(t.normalised_score) AS episodes, round(avg(t.normalised_score), 3) AS norm,
    round(stddevSamp(t.normalised_score) / sqrt(count(t.normalised_score)), 3) AS se, round(avg(t.num_steps), 1) AS steps
FROM trajectories AS t FINAL
INNER JOIN (SELECT episode_id, policy_version_min FROM scored FINAL
            WHERE policy IN ({q(policy)}, {q(annotator)}) AND NOT infra_failure
              AND {own_scorer(policy, annotator)}) AS s ON t.episode_id = s.episode_id
WHERE t.policy IN ({q(policy)}, {q(annotator)}) AND t.status = 'ended' AND t.suite = 'games'
GROUP BY game, phase ORDER BY game, phase"""


def expert_agreement(policy: str, bucket: int = 5) -> str:
    """Per task and ``bucket`` of acting versions, the share of the policy's steps labelled with a
    key press (``steps.expert_action``, `flywheel rollout --expert-labels`: the arrow games) on
    which it pressed the key the solver would have. Click labels (mines) are left out: a click's
    cell would need the game's grid to compare."""
    return f"""SELECT t.task_name AS task, intDiv(s.policy_version, {int(bucket)}) * {int(bucket)} AS from_version,
    count() AS labelled,
    round(avg(JSONExtractString(s.action, 'type') = JSONExtractString(s.expert_action, 'type')
              AND JSONExtractString(s.action, 'key') = JSONExtractString(s.expert_action, 'key')), 3) AS agreement
FROM steps AS s FINAL
INNER JOIN (SELECT DISTINCT episode_id, task_name FROM trajectories FINAL WHERE policy = {q(policy)}) AS t
    ON s.episode_id = t.episode_id
WHERE s.policy = {q(policy)} AND JSONExtractString(s.expert_action, 'key') != ''
GROUP BY task, from_version ORDER BY task, from_version"""
