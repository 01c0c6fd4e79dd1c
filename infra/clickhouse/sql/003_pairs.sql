-- Reflection pairs (flywheel.pairs.v1, UI-TARS section 4.5): one row per PreferencePair. Like
-- every event table, a ReplacingMergeTree keyed on the event id (episode, kind, annotator), so
-- a re-annotated episode replaces its pair instead of adding one.

CREATE TABLE IF NOT EXISTS pairs (
    event_id String,
    episode_id String,
    kind LowCardinality(String),
    task_id String,
    task_name LowCardinality(String),
    suite LowCardinality(String),
    seed Int64,
    tau UInt32,
    step_index UInt32,
    instruction String,
    screenshot_sha256 String,
    chosen_action_type LowCardinality(String),
    chosen_action String,
    rejected_action_type LowCardinality(String),
    rejected_action Nullable(String),
    rejected_raw_output Nullable(String),
    annotator LowCardinality(String),
    policy LowCardinality(String),
    policy_version UInt32,
    created_at DateTime64(3, 'UTC'),
    ingested_at DateTime64(3, 'UTC') DEFAULT now64(3)
) ENGINE = ReplacingMergeTree(ingested_at)
ORDER BY (episode_id, event_id);

-- Pairs per task, kind and annotator: how many, where in the episode the first error falls,
-- and how often the agent's wrong action was even of the right type.
CREATE OR REPLACE VIEW v_pairs_by_task AS
SELECT
    task_name,
    kind,
    annotator,
    count() AS pairs,
    uniqExact(episode_id) AS episodes,
    countIf(rejected_action IS NOT NULL) AS with_rejected,
    round(avg(tau), 2) AS mean_tau,
    max(tau) AS max_tau,
    round(countIf(rejected_action_type = chosen_action_type) / count(), 4) AS same_type_share,
    min(policy_version) AS policy_version_min,
    max(policy_version) AS policy_version_max
FROM pairs FINAL
GROUP BY task_name, kind, annotator
ORDER BY task_name, kind, annotator;
