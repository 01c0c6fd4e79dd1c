-- Trainer metric names carry their group, CleanRL style ("losses/value_loss"; the groups and
-- every name: trainer/core/metric_names.py). Rows written before keep their stored names in
-- trainer_metrics; this view shows them under today's names: the map below is
-- trainer.core.metric_names.RENAMED (old -> new), so one query reads runs from before and after.

CREATE OR REPLACE VIEW v_trainer_metrics AS
WITH map(
    'pg_loss',                  'losses/pg_loss',
    'value_loss',               'losses/value_loss',
    'entropy',                  'losses/entropy',
    'approx_kl',                'losses/approx_kl',
    'clip_frac',                'losses/clip_frac',
    'explained_variance',       'value/explained_variance',
    'value_reward_corr',        'value/reward_corr',
    'reward_mean',              'batch/reward_mean',
    'success_rate',             'batch/success_rate',
    'episode_length',           'batch/episode_length',
    'episodes',                 'batch/episodes',
    'steps',                    'batch/steps',
    'staleness_mean',           'batch/staleness_mean',
    'staleness_max',            'batch/staleness_max',
    'thought_length',           'batch/thought_length',
    'critic_only',              'train/critic_only',
    'update_time_s',            'perf/update_time_s',
    'idle_fraction',            'perf/idle_fraction',
    'stale_dropped_total',      'stream/stale_dropped_total',
    'dead_lettered_total',      'stream/dead_lettered_total',
    'duplicates_skipped_total', 'stream/duplicates_skipped_total',
    'trained_total',            'stream/trained_total',
    'sft_loss',                 'losses/sft_loss',
    'ct_loss',                  'losses/ct_loss',
    'sft_tokens',               'batch/tokens',
    'ct_tokens',                'batch/tokens',
    'sft_samples',              'batch/samples',
    'ct_samples',               'batch/samples',
    'sft_trajectories',         'batch/trajectories',
    'ct_trajectories',          'batch/trajectories',
    'sft_grad_norm',            'train/grad_norm',
    'ct_grad_norm',             'train/grad_norm',
    'sft_update_s',             'perf/update_time_s',
    'ct_update_s',              'perf/update_time_s',
    'bc/loss',                  'losses/bc_loss',
    'bc/demos',                 'batch/demos',
    'bc/steps',                 'batch/steps',
    'dpo/loss',                 'losses/dpo_loss',
    'dpo/pairs',                'batch/pairs'
) AS renamed
SELECT run_id, update, policy, policy_version, ts,
    if(mapContains(renamed, stored_name), renamed[stored_name], stored_name) AS name, value
FROM trainer_metrics FINAL
ARRAY JOIN mapKeys(metrics) AS stored_name, mapValues(metrics) AS value
ORDER BY run_id, update, name;
