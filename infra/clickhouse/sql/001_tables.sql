-- Flywheel event tables. Every table is a ReplacingMergeTree keyed on the event id (ORDER BY
-- ends in it), so a replayed record replaces its earlier copy instead of adding a row.
-- Duplicates disappear at merge time: count with FINAL (or argMax) when exactness matters;
-- the analyst views below already do.

CREATE TABLE IF NOT EXISTS steps (
    event_id String,
    episode_id String,
    step_index UInt32,
    ts DateTime64(3, 'UTC'),
    started_at DateTime64(3, 'UTC'),
    policy LowCardinality(String),
    policy_version UInt32,
    action_type LowCardinality(String),
    action String,
    thought String,
    thought_chars UInt32,
    thought_words UInt32,
    raw_output String,
    parse_error Nullable(String),
    logprob Float64,
    value Nullable(Float64),
    reward Float64,
    done Bool,
    latency_policy_ms Float64,
    latency_env_ms Float64,
    error Nullable(String),
    instruction String,
    screenshot_sha256 String,
    screenshot_uri String,
    screen_width UInt32,
    screen_height UInt32,
    next_screenshot_sha256 Nullable(String),
    ingested_at DateTime64(3, 'UTC') DEFAULT now64(3)
) ENGINE = ReplacingMergeTree(ingested_at)
ORDER BY (episode_id, event_id);

CREATE TABLE IF NOT EXISTS episodes (
    event_id String,
    episode_id String,
    kind LowCardinality(String),
    ts DateTime64(3, 'UTC'),
    task_id String,
    task_name LowCardinality(String),
    suite LowCardinality(String),
    sandbox LowCardinality(String),
    worker_id String,
    policy LowCardinality(String),
    policy_version Nullable(UInt32),
    num_steps Nullable(UInt32),
    outcome_reward Nullable(Float64),
    success Nullable(Bool),
    reason String,
    infra_failure Nullable(Bool),
    ingested_at DateTime64(3, 'UTC') DEFAULT now64(3)
) ENGINE = ReplacingMergeTree(ingested_at)
ORDER BY (episode_id, event_id);

CREATE TABLE IF NOT EXISTS trajectories (
    event_id String,
    episode_id String,
    task_id String,
    task_name LowCardinality(String),
    suite LowCardinality(String),
    instruction String,
    sandbox LowCardinality(String),
    worker_id String,
    policy LowCardinality(String),
    policy_version_min UInt32,
    policy_version_max UInt32,
    status LowCardinality(String),
    num_steps UInt32,
    outcome_reward Float64,
    success Bool,
    end_reason String,
    infra_failure Bool,
    started_at DateTime64(3, 'UTC'),
    ended_at DateTime64(3, 'UTC'),
    duration_s Float64,
    duplicates_dropped UInt32,
    missing_steps Array(UInt32),
    ingested_at DateTime64(3, 'UTC') DEFAULT now64(3)
) ENGINE = ReplacingMergeTree(ingested_at)
ORDER BY event_id;

CREATE TABLE IF NOT EXISTS scored (
    event_id String,
    episode_id String,
    scorer LowCardinality(String),
    scorer_version LowCardinality(String),
    task_id String,
    task_name LowCardinality(String),
    policy LowCardinality(String),
    policy_version_min UInt32,
    policy_version_max UInt32,
    status LowCardinality(String),
    num_steps UInt32,
    success Bool,
    infra_failure Bool,
    reward Float64,
    components Map(String, Float64),
    verdict UInt8,
    rl_eligible Bool,
    routes Array(LowCardinality(String)),
    route_reasons Array(String),
    anomalies Array(String),
    ended_at DateTime64(3, 'UTC'),
    scored_at DateTime64(3, 'UTC'),
    ingested_at DateTime64(3, 'UTC') DEFAULT now64(3)
) ENGINE = ReplacingMergeTree(ingested_at)
ORDER BY (scorer, scorer_version, event_id);

CREATE TABLE IF NOT EXISTS policy_versions (
    event_id String,
    policy LowCardinality(String),
    version UInt32,
    kind LowCardinality(String),
    uri String,
    sha256 String,
    parent Nullable(UInt32),
    created_at DateTime64(3, 'UTC'),
    metrics Map(String, Float64),
    config String,
    ingested_at DateTime64(3, 'UTC') DEFAULT now64(3)
) ENGINE = ReplacingMergeTree(ingested_at)
ORDER BY (policy, event_id);

CREATE TABLE IF NOT EXISTS trainer_metrics (
    event_id String,
    run_id String,
    update UInt32,
    policy LowCardinality(String),
    policy_version UInt32,
    ts DateTime64(3, 'UTC'),
    metrics Map(String, Float64),
    ingested_at DateTime64(3, 'UTC') DEFAULT now64(3)
) ENGINE = ReplacingMergeTree(ingested_at)
ORDER BY (run_id, event_id);

CREATE TABLE IF NOT EXISTS dead_letters (
    event_id String,
    stage LowCardinality(String),
    error_type LowCardinality(String),
    message String,
    source_topic LowCardinality(String),
    source_partition Int32,
    source_offset Int64,
    original_key Nullable(String),
    original_value String,
    ts DateTime64(3, 'UTC'),
    ingested_at DateTime64(3, 'UTC') DEFAULT now64(3)
) ENGINE = ReplacingMergeTree(ingested_at)
ORDER BY (stage, event_id);
