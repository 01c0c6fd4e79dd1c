"""Every trainer metric's name, in one place: ``group/name``, CleanRL style (``losses/value_loss``).

These are the keys of ``TrainerMetrics.metrics`` (flywheel.metrics.v1, ClickHouse's
``trainer_metrics`` and ``v_trainer_metrics``) and of ``PolicyVersion.metrics``
(``policy_versions``), whichever trainer wrote them: PPO (trainer.rl.update, trainer.rl.streaming_ppo),
SFT / CT (trainer.sft.lm_stream), behaviour cloning (trainer.sft.bc), DPO (trainer.dpo.train) and merges
(trainer.serving.merge). A quantity two trainers share has one name (``batch/steps``); a loss names its
objective (``losses/pg_loss``, ``losses/sft_loss``), so a version's metrics say how it was made.

Names written before the groups existed map to theirs through ``RENAMED``; ClickHouse's
``v_trainer_metrics`` applies the same map (migration 004) to rows already stored.
"""

from __future__ import annotations

GROUPS: dict[str, str] = {
    "losses": "what an optimiser minimises and its parts (PPO's clip fraction and approximate KL too)",
    "value": "how well the critic predicts the returns",
    "batch": "the data one update trained on: episodes, steps, rewards, staleness, tokens, pairs",
    "train": "the optimisation itself: phase flags and the gradient norm",
    "perf": "time: the update's seconds and the share of wall-clock spent waiting for data",
    "stream": "the trainer's input stream, counted since the checkpoint began (running totals)",
    "dpo": "DPO's implicit rewards, preference accuracy and beta",
    "bc": "how well behaviour cloning imitates its demonstrations",
    "merge": "a merge's interpolation weights, one per merged version",
}

# losses/
PG_LOSS = "losses/pg_loss"
VALUE_LOSS = "losses/value_loss"
ENTROPY = "losses/entropy"
APPROX_KL = "losses/approx_kl"  # k3 KL(start || new), the start being the policy the update began from (the behaviour policy when tis_cap is 0): how far it moved
KL_REF = "losses/kl_ref"  # k3 KL to the reference policy (e.g. pi_sft) that kl_coef penalises
CLIP_FRAC = "losses/clip_frac"
SFT_LOSS = "losses/sft_loss"  # token-mean NLL of the annotated steps
CT_LOSS = "losses/ct_loss"  # the same NLL on continual-training data
LM_LOSS = {"sft": SFT_LOSS, "ct": CT_LOSS}
BC_LOSS = "losses/bc_loss"  # mean NLL of the demonstrated actions
DPO_LOSS = "losses/dpo_loss"
EXPERT_LOSS = "losses/expert_loss"  # mean NLL of the solver's labels on the policy's own states (expert_coef)
DAGGER_LOSS = "losses/dagger_loss"  # mean NLL of the aggregated labels in a DAgger round's last epoch (trainer.sft.dagger)
DAGGER_LOSS_FIRST = "losses/dagger_loss_first"  # ... in its first epoch
RFT_LOSS = "losses/rft_loss"  # mean NLL of the successful steps a rejection-sampling fine-tuning round trained on
SIL_LOSS = "losses/sil_loss"  # self-imitation's loss on replayed steps, before sil_coef (trainer.rl.self_imitation)
SIL_ADVANTAGE = "losses/sil_advantage"  # mean clipped advantage (R - V)+ of the replayed steps, as last measured

# value/
EXPLAINED_VARIANCE = "value/explained_variance"
REWARD_CORR = "value/reward_corr"  # V(s_0) against the episode's return

# batch/
REWARD_MEAN = "batch/reward_mean"
SUCCESS_RATE = "batch/success_rate"
EPISODE_LENGTH = "batch/episode_length"
EPISODES = "batch/episodes"
STEPS = "batch/steps"
STALENESS_MEAN = "batch/staleness_mean"
STALENESS_MAX = "batch/staleness_max"
THOUGHT_LENGTH = "batch/thought_length"
TRAJECTORIES = "batch/trajectories"
SAMPLES = "batch/samples"
TOKENS = "batch/tokens"
DEMOS = "batch/demos"
PAIRS = "batch/pairs"
RFT_TRAJECTORIES = "batch/rft_trajectories"  # successful trajectories of an RFT round (demonstrations included)
RFT_OWN = "batch/rft_own"  # ... of which the policy's own
RFT_STEPS = "batch/rft_steps"
RFT_SOLVED_TASKS = "batch/rft_solved_tasks"  # tasks a round took no own successes of (solved: trainer.sft.rft.solved_tasks)
DAGGER_STEPS = "batch/dagger_steps"  # labelled steps a DAgger round fitted (its buffer)
SIL_STEPS = "batch/sil_steps"  # replayed steps self-imitation drew for the update
SIL_REPLAY_STEPS = "batch/sil_replay_steps"  # steps the self-imitation replay held when they were drawn
SIL_REPLAY_EPISODES = "batch/sil_replay_episodes"  # ... and episodes
RFT_SKIPPED = "batch/rft_skipped"  # chosen trajectories the policy could not learn from (screenshot gone, another action space)

# train/
CRITIC_ONLY = "train/critic_only"  # 1 during value pretraining
NONFINITE_SKIPPED = "train/nonfinite_skipped"  # minibatches whose gradient was NaN/inf: no step
EPOCHS = "train/epochs"  # PPO epochs an update ran (fewer than asked: target_kl stopped it)
GRAD_NORM = "train/grad_norm"
ENT_COEF = "train/ent_coef"  # the entropy coefficient the update used (the entropy band adapts it: ent_floor)

# perf/
UPDATE_TIME_S = "perf/update_time_s"
IDLE_FRACTION = "perf/idle_fraction"
RFT_TIME_S = "perf/rft_time_s"
DAGGER_TIME_S = "perf/dagger_time_s"

# stream/
STALE_DROPPED_TOTAL = "stream/stale_dropped_total"
DEAD_LETTERED_TOTAL = "stream/dead_lettered_total"
DUPLICATES_SKIPPED_TOTAL = "stream/duplicates_skipped_total"
TRAINED_TOTAL = "stream/trained_total"
DAGGER_FAILED_TOTAL = "stream/dagger_failed_total"  # DAgger rounds that failed (e.g. out of memory): PPO went on
RFT_FAILED_TOTAL = "stream/rft_failed_total"  # RFT rounds that failed (the sft topic unreadable in time): PPO went on

# dpo/
DPO_REWARD_MARGIN = "dpo/reward_margin"
DPO_ACCURACY = "dpo/accuracy"
DPO_CHOSEN_REWARD = "dpo/chosen_reward"
DPO_REJECTED_REWARD = "dpo/rejected_reward"
DPO_BETA = "dpo/beta"
DPO_CHOSEN_NLL = "dpo/chosen_nll"  # per-token NLL of the chosen side (the RPO term, before its weight)

# bc/
BC_TRAIN_MATCH = "bc/train_match"


def merge_alpha(version: int) -> str:
    """merge/: the weight of ``version`` in a merge."""
    return f"merge/alpha_v{version}"


def group(name: str) -> str:
    """The group of a metric name ("losses" of "losses/pg_loss"); "" when it has none."""
    return name.split("/", 1)[0] if "/" in name else ""


# old name -> new name (merge's old "merge_alpha_v<N>" became merge_alpha(N))
RENAMED: dict[str, str] = {
    "pg_loss": PG_LOSS, "value_loss": VALUE_LOSS, "entropy": ENTROPY, "approx_kl": APPROX_KL, "clip_frac": CLIP_FRAC,
    "explained_variance": EXPLAINED_VARIANCE, "value_reward_corr": REWARD_CORR,
    "reward_mean": REWARD_MEAN, "success_rate": SUCCESS_RATE, "episode_length": EPISODE_LENGTH,
    "episodes": EPISODES, "steps": STEPS, "staleness_mean": STALENESS_MEAN, "staleness_max": STALENESS_MAX,
    "thought_length": THOUGHT_LENGTH, "critic_only": CRITIC_ONLY, "update_time_s": UPDATE_TIME_S,
    "idle_fraction": IDLE_FRACTION, "stale_dropped_total": STALE_DROPPED_TOTAL,
    "dead_lettered_total": DEAD_LETTERED_TOTAL, "duplicates_skipped_total": DUPLICATES_SKIPPED_TOTAL,
    "trained_total": TRAINED_TOTAL,
    "sft_loss": SFT_LOSS, "ct_loss": CT_LOSS, "sft_tokens": TOKENS, "ct_tokens": TOKENS, "sft_samples": SAMPLES,
    "ct_samples": SAMPLES, "sft_trajectories": TRAJECTORIES, "ct_trajectories": TRAJECTORIES,
    "sft_grad_norm": GRAD_NORM, "ct_grad_norm": GRAD_NORM, "sft_update_s": UPDATE_TIME_S, "ct_update_s": UPDATE_TIME_S,
    "bc/loss": BC_LOSS, "bc/demos": DEMOS, "bc/steps": STEPS,
    "dpo/loss": DPO_LOSS, "dpo/pairs": PAIRS,
}


def current(name: str) -> str:
    """A metric's name today, given one that may have been written before the groups."""
    return RENAMED.get(name, name)
