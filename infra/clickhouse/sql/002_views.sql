-- Analyst views. Each reads its tables with FINAL so a replayed record is counted once.

CREATE OR REPLACE VIEW v_success_by_policy AS
SELECT
    policy,
    policy_version_min AS policy_version,
    task_name,
    scorer,
    scorer_version,
    count() AS episodes,
    round(avg(success), 4) AS success_rate,
    round(avg(reward), 4) AS mean_reward,
    round(avg(verdict), 4) AS sft_share,
    countIf(infra_failure) AS infra_failures
FROM scored FINAL
GROUP BY policy, policy_version, task_name, scorer, scorer_version
ORDER BY policy, policy_version, task_name, scorer, scorer_version;

CREATE OR REPLACE VIEW v_reward_over_time AS
SELECT
    toStartOfMinute(scored_at) AS minute,
    policy,
    scorer,
    scorer_version,
    count() AS episodes,
    round(avg(reward), 4) AS mean_reward,
    round(avg(success), 4) AS success_rate
FROM scored FINAL
GROUP BY minute, policy, scorer, scorer_version
ORDER BY minute, policy, scorer, scorer_version;

CREATE OR REPLACE VIEW v_steps_per_episode AS
SELECT
    task_name,
    policy,
    status,
    count() AS episodes,
    round(avg(num_steps), 2) AS mean_steps,
    quantileExact(0.5)(num_steps) AS p50_steps,
    quantileExact(0.9)(num_steps) AS p90_steps,
    max(num_steps) AS max_steps
FROM trajectories FINAL
GROUP BY task_name, policy, status
ORDER BY task_name, policy, status;

-- UI-TARS-2 Fig. 9: how long the model thinks per step as training goes on (policy versions).
CREATE OR REPLACE VIEW v_thought_length AS
SELECT
    policy,
    policy_version,
    count() AS steps,
    uniqExact(episode_id) AS episodes,
    round(avg(thought_chars), 1) AS mean_thought_chars,
    round(avg(thought_words), 1) AS mean_thought_words,
    quantileExact(0.9)(thought_words) AS p90_thought_words
FROM steps FINAL
GROUP BY policy, policy_version
ORDER BY policy, policy_version;

CREATE OR REPLACE VIEW v_action_types AS
SELECT
    policy,
    policy_version,
    if(action_type = '', '(unparsed)', action_type) AS action,
    count() AS steps,
    round(steps / sum(steps) OVER (PARTITION BY policy, policy_version), 4) AS share
FROM steps FINAL
GROUP BY policy, policy_version, action
ORDER BY policy, policy_version, steps DESC, action;

-- Staleness of a trajectory: the trainer-side policy version when it was scored (the latest
-- PolicyVersion published before scored_at; never below the versions the trajectory itself
-- used) minus the oldest behaviour policy version among its steps.
CREATE OR REPLACE VIEW v_staleness_histogram AS
SELECT
    s.policy AS policy,
    greatest(p.version, s.policy_version_max) - s.policy_version_min AS staleness,
    count() AS trajectories,
    countIf(s.rl_eligible) AS rl_eligible
FROM (SELECT * FROM scored FINAL) AS s
ASOF LEFT JOIN (SELECT policy, version, created_at FROM policy_versions FINAL) AS p
    ON s.policy = p.policy AND s.scored_at >= p.created_at
GROUP BY policy, staleness
ORDER BY policy, staleness;

CREATE OR REPLACE VIEW v_dead_letters_by_stage AS
SELECT
    stage,
    error_type,
    source_topic,
    count() AS letters,
    min(ts) AS first_at,
    max(ts) AS last_at
FROM dead_letters FINAL
GROUP BY stage, error_type, source_topic
ORDER BY letters DESC, stage, error_type;

CREATE OR REPLACE VIEW v_trainer_metrics AS
SELECT run_id, update, policy, policy_version, ts, name, value
FROM trainer_metrics FINAL
ARRAY JOIN mapKeys(metrics) AS name, mapValues(metrics) AS value
ORDER BY run_id, update, name;
