"""The PPO learner's intake: which scored trajectories become training data, decoded and pooled
until a batch is full; the one place where staleness is decided.

UI-TARS-2's partially-filled rollout pool: a batch is ``min_batch`` pooled trajectories, or what
holds ``max_batch_steps`` steps (a pool of long game episodes keeps its preprocessed inputs
bounded), or what the pool holds when the loop's interval (``max_wait_s``) flushes it.

A record is skipped, and counted by its fate, when it is another policy's, not RL-eligible (the
scorer's word), holds a step not sampled from the policy (``Step.sampled`` false: greedy or
scripted, whatever a scorer said: its log-probs are no behaviour probabilities), was scored by
another scorer than ``cfg.scorer`` (a `flywheel rescore` run), or is a copy of an episode already
trained on (the checkpoint's ``TrainedIds``) or pooled. One that cannot be decoded or that the
policy cannot represent is dead-lettered.

Staleness: a trajectory produced by version ``v`` is trainable while the policy's version is at
most ``max_staleness`` past ``v`` (``infra.runtime.versions.is_stale``, the bound the router
shares). It is decided on arrival, before a screenshot is decoded, so a trainer that fell behind
catches up cheaply and an update waits for ``min_batch`` fresh trajectories instead of training
on the few that survived a stale backlog. The version moves only after a batch is taken, so
every sample of a taken batch is still within the window; the trained ids are remembered for the
same window (``TrainedIds.prune``).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from infra.runtime import versions
from infra.runtime.checkpoint import TrainedIds
from infra.runtime.consume_loop import DeadLetters
from infra.runtime.policy import policy_kind
from schemas.blobs import BlobNotFound, BlobStore
from schemas.codec import DecodeError, decode
from schemas.events import ScoredTrajectory
from trainer.rl.config import TrainConfig
from trainer.rl.rewards import step_rewards
from trainer.rl.update import EpisodeSample


def to_episode(scored: ScoredTrajectory, policy, store: BlobStore) -> EpisodeSample:
    """A scored trajectory as training data; ValueError when this policy cannot train on it."""
    traj = scored.trajectory
    if not traj.steps:
        raise ValueError("trajectory has no steps")
    for step in traj.steps:
        if not policy.can_represent(step.action):
            raise ValueError(f"step {step.step_index}: action {step.action!r} is outside this policy's action space")
    images = policy.step_inputs(traj, store)  # each step as the policy saw it (the LM: its whole context)
    actions = [step.action for step in traj.steps]
    rewards = step_rewards(scored)  # at the end; a game's score changes on the steps that made them
    return EpisodeSample(
        episode_id=traj.episode_id, images=images, instructions=[s.observation.instruction for s in traj.steps],
        actions=actions, logprobs=[s.logprob for s in traj.steps], rewards=rewards,
        policy_version=traj.policy_versions[0],
        thought_chars=float(np.mean([len(s.thought) for s in traj.steps])), task=traj.task.name, success=learnt_success(scored),
        truncated=traj.cut_short,  # a task judged at its end that ran out failed (scored so): terminal
        bootstrap_input=policy.bootstrap_input(traj, store) if traj.cut_short else None,
        experts=expert_labels(traj, policy),
    )


def learnt_success(scored: ScoredTrajectory) -> bool:
    """Whether the learner may treat the episode as a success (self-imitation's replay, RFT's
    per-task window): the page's verdict, except where the streams' judge decided the task
    (a ``judge_outcome`` component, streams.score): there the scorer's V(s), so RL on a verifier's
    reward learns nothing from the page's label, which stays in the trajectory to measure against."""
    if scored.judged:
        return bool(scored.verdict)
    return scored.trajectory.success


def expert_labels(traj, policy) -> list[Any] | None:
    """Each step's expert label the policy can be trained on (Step.expert_action), else None per
    step; None for a policy that scores only its own samples (``scores_actions``)."""
    if not policy_kind(policy.kind).scores_actions:
        return None
    return [s.expert_action if s.expert_action is not None
            and policy.can_represent(s.expert_action, s.observation.instruction) else None for s in traj.steps]


class Intake:
    """add: decode, filter, pool a record; ready: a batch is full; take: the batch.

    ``count(fate)`` records what became of a record that was not pooled (the learner keeps the
    totals in its checkpoint and on /metrics)."""

    def __init__(self, cfg: TrainConfig, max_staleness: int, store: BlobStore, policy,
                 count: Callable[[str], int]) -> None:
        self.cfg, self.max_staleness, self.store, self.policy, self.count = cfg, max_staleness, store, policy, count
        self.pool: list[EpisodeSample] = []
        self.stale_dropped = 0  # since the last batch was taken

    def add(self, record: Any, dlq: DeadLetters, trained: TrainedIds) -> None:
        try:
            scored = decode(record.value(), ScoredTrajectory)
            fate = self._skipped(scored, trained)
            if fate is not None:
                self.count(fate)
                self.stale_dropped += fate == "stale_dropped"
                return
            self.pool.append(to_episode(scored, self.policy, self.store))
        except (DecodeError, ValueError, BlobNotFound) as exc:
            self.count("dead_lettered")
            dlq.send_record(exc, record)

    def _skipped(self, scored: ScoredTrajectory, trained: TrainedIds) -> str | None:
        """Why ``scored`` is not PPO data for this learner (its fate), or None to pool it."""
        traj = scored.trajectory
        if traj.policy != self.cfg.policy_name:
            return "skipped_other_policy"
        if not scored.rl_eligible:  # a router sends none such; a replay or a hand may
            return "skipped_not_eligible"
        if traj.unsampled_steps:
            return "skipped_unsampled"
        if scored.scorer != self.cfg.scorer:
            return "skipped_other_scorer"
        if scored.episode_id in trained or any(e.episode_id == scored.episode_id for e in self.pool):
            return "duplicates_skipped"
        if self.is_stale(traj.policy_versions[0]):
            return "stale_dropped"
        return None

    def is_stale(self, produced_by: int) -> bool:
        """Whether a trajectory produced by version ``produced_by`` is too old to train on now."""
        return versions.is_stale(self.policy.version, produced_by, self.max_staleness)

    def ready(self) -> bool:
        steps = sum(len(e.actions) for e in self.pool)
        return len(self.pool) >= self.cfg.min_batch or steps >= self.cfg.max_batch_steps

    def take(self) -> tuple[list[EpisodeSample], int]:
        """The pooled batch (emptied) and how many stale trajectories were dropped since the last
        batch; an empty pool leaves that count to the next batch."""
        batch, self.pool = self.pool, []
        dropped = self.stale_dropped
        if batch:
            self.stale_dropped = 0
        return batch, dropped

    def lags(self, batch: list[EpisodeSample]) -> list[int]:
        """How many versions behind the policy each sample of ``batch`` was produced."""
        return [self.policy.version - e.policy_version for e in batch]

    def mark_trained(self, batch: list[EpisodeSample], trained: TrainedIds) -> None:
        """Remember ``batch``'s episodes as trained on, and forget those no copy of which could
        still be trained at the policy's (new) version."""
        for e in batch:
            trained.add(e.episode_id, e.policy_version)
        trained.prune(self.policy.version, self.max_staleness)
