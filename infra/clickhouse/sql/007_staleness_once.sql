-- v_staleness_histogram (002) counted every scored row: after a `flywheel rescore` by another
-- scorer an episode counted twice, the second time at the newer policy version (the rescore's
-- scored_at). One row per episode now: the first scorer's, by scored_at (the run's own stream
-- processors; app.demo_queries.first_scorer keeps the same row).

CREATE OR REPLACE VIEW v_staleness_histogram AS
SELECT
    s.policy AS policy,
    greatest(p.version, s.policy_version_max) - s.policy_version_min AS staleness,
    count() AS trajectories,
    countIf(s.rl_eligible) AS rl_eligible
FROM (SELECT * FROM scored FINAL ORDER BY scored_at LIMIT 1 BY episode_id) AS s
ASOF LEFT JOIN (SELECT policy, version, created_at FROM policy_versions FINAL) AS p
    ON s.policy = p.policy AND s.scored_at >= p.created_at
GROUP BY policy, staleness
ORDER BY policy, staleness;
