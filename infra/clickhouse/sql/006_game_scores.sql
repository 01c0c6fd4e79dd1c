-- Games (producers.games): a trajectory carries its final score and its normalised score
-- (0 = the random policy's mean, 1 = the scripted heuristic's; Trajectory.score and
-- normalised_score). Other tasks' rows, and rows written before, hold NULL.

ALTER TABLE trajectories ADD COLUMN IF NOT EXISTS score Nullable(Float64) AFTER success;

ALTER TABLE trajectories ADD COLUMN IF NOT EXISTS normalised_score Nullable(Float64) AFTER score;

-- Score curves: per game, policy, policy version (the oldest among the steps, as in
-- v_success_by_policy) and minute the episode ended, the mean final and normalised score. An
-- infra failure is left out (the game was not played out); `episodes` weighs a row when rows
-- are merged into a coarser bucket.
CREATE OR REPLACE VIEW v_game_scores AS
SELECT
    task_name AS game,
    policy,
    policy_version_min AS policy_version,
    toStartOfMinute(ended_at) AS minute,
    count() AS episodes,
    round(avg(score), 4) AS mean_score,
    round(avg(normalised_score), 4) AS mean_normalised_score,
    round(avg(num_steps), 1) AS mean_steps
FROM trajectories FINAL
WHERE suite = 'games' AND score IS NOT NULL AND NOT infra_failure
GROUP BY game, policy, policy_version, minute
ORDER BY game, policy, policy_version, minute;
