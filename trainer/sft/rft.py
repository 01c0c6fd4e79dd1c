"""Rejection-sampling fine-tuning (RFT) inside the PPO trainer: UI-TARS-2's flywheel turned back
on the policy.

Every ``rft_every`` PPO updates the trainer reads flywheel.sft.v1 (a snapshot to its end, as
``flywheel bc`` does), keeps the V(s) = 1 trajectories of its own policy and of its scripted
annotator (the cold start's demonstrations), and fine-tunes the current weights on them by
maximum likelihood of every step (``trainer.sft.bc``'s loss) before the version is published: the
policy's own successes become demonstrations. Per task it keeps at most ``rft_per_task``
demonstrations and the newest ``rft_per_task`` of its own successes, so a task the policy already
solves does not crowd out one it rarely solves.

The round runs inside the update that precedes it, so the delivery guarantee is the update's:
a crash before the checkpoint repeats both, on a snapshot that may have grown. The policy's own
successes are trained on again in later rounds (up to ``rft_per_task`` of the newest per task):
that is the point of the flywheel, not a duplicate. A round that fails (the topic unreadable in
time) is logged and counted (``stream/rft_failed_total``) and PPO goes on without it.

What it does not do: the value head is not trained by the round, but the trunk it reads moves, so
the critic's next predictions are on shifted features (PPO's next update refits it); the
version's PPO metrics (approx_kl, entropy, clip_frac) describe the update before the round. Each
round re-reads the whole sft topic (no offsets kept between rounds): seconds for a demo's few
thousand records, more on a long-lived shared topic.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from typing import Iterable

from schemas.blobs import BlobStore
from schemas.events import ScoredTrajectory
from trainer.core import metric_names as M
from infra.runtime.config import ConfigError

log = logging.getLogger("flywheel.rft")
STAGE = "rft"


def annotator_of(policy: str) -> str:
    """The policy name of ``policy``'s scripted annotator (``flywheel demo``'s cold start)."""
    return f"scripted-{policy}"


RFT_WINDOW = 100  # trained episodes per task that say whether the policy has solved it
RFT_MIN_EPISODES = 20  # ... and how many it takes to say so


def solved_tasks(outcomes: dict[str, list[int]], rate: float, min_episodes: int = RFT_MIN_EPISODES) -> frozenset[str]:
    """The tasks whose recent trained episodes (``outcomes``: task -> 0/1 per episode, newest last)
    number at least ``min_episodes`` and succeeded at least ``rate`` of the time."""
    return frozenset(t for t, xs in outcomes.items() if len(xs) >= min_episodes and sum(xs) / len(xs) >= rate)


def select_rft(records: Iterable[ScoredTrajectory], policy: str, per_task: int,
               scorer: str = "rule-v1", solved: frozenset[str] = frozenset()) -> list[ScoredTrajectory]:
    """Successful trajectories for a round: per task, the demonstrations of ``policy``'s
    annotator and the newest ``per_task`` of ``policy``'s own (each capped at ``per_task``; none
    of its own for a task in ``solved``, which PPO keeps where it is), one per episode, as
    ``scorer`` judged them (a `flywheel rescore` copy by another scorer is left out); in a fixed
    order (task, then episode id) so a round does not depend on partition order."""
    demos: dict[str, dict[str, ScoredTrajectory]] = defaultdict(dict)
    own: dict[str, dict[str, ScoredTrajectory]] = defaultdict(dict)
    for s in records:
        t = s.trajectory
        if s.scorer != scorer or s.verdict != 1 or not t.steps:  # V(s)=1: a game's from the scorer's threshold
            continue
        if t.policy == annotator_of(policy):
            demos[t.task.name].setdefault(t.episode_id, s)
        elif t.policy == policy:
            own[t.task.name].setdefault(t.episode_id, s)
    out = []
    for task in sorted(set(demos) | set(own)):
        newest = sorted(own[task].values(), key=lambda s: (s.trajectory.ended_at, s.episode_id))[-per_task:] \
            if per_task and task not in solved else []
        first = [demos[task][eid] for eid in sorted(demos[task])[:max(per_task, 1)]]
        out += sorted([*first, *newest], key=lambda s: s.episode_id)
    return out


def fine_tune(policy, data, epochs: int, lr: float, minibatch_size: int, seed: int) -> list[float]:
    """``trainer.sft.bc``'s maximum likelihood on the current weights, with an optimiser of its own
    (PPO's Adam moments are left as they are), leaving the policy in the mode it was in; -> the
    mean loss per epoch."""
    # local: loads confluent-kafka, numpy, torch, needed only on this path
    from trainer.sft.bc import bc_train

    was_training = policy.training
    try:
        return bc_train(policy, data, epochs, lr, minibatch_size, seed)
    finally:
        policy.train(was_training)


def rft_round(policy, settings, store: BlobStore, policy_name: str, per_task: int, epochs: int, lr: float,
              seed: int, scorer: str = "rule-v1", read_timeout_s: float = 120.0, cache: dict | None = None,
              solved: frozenset[str] = frozenset()) -> dict[str, float]:
    """One round on the current snapshot of flywheel.sft.v1; -> its metrics (empty when there
    was nothing to learn from). Raises what reading the topic raises (the caller decides).
    ``cache`` carries the chosen trajectories' step inputs from one round to the next."""
    # local: loads confluent-kafka, numpy, torch, needed only on this path
    from trainer.sft.bc import examples, read_sft
    from infra.runtime.policy import policy_kind

    t0 = time.monotonic()
    chosen = select_rft(read_sft(settings, STAGE, read_timeout_s), policy_name, per_task, scorer, solved)
    if not chosen:
        log.info("RFT: no successful trajectory of %s on the sft topic yet", policy_name)
        return {}
    try:
        data = examples(policy, chosen, store, cache)
    except ConfigError as exc:  # none representable (another action space) or every screenshot gone
        log.warning("RFT skipped: %s", exc)
        return {}
    own = sum(s.trajectory.policy == policy_name for s in chosen)
    losses = fine_tune(policy, data, epochs, lr, policy_kind(policy.kind).bc_minibatch_size, seed)
    skipped = sum(data.skipped.values())
    log.info("RFT: %d trajectories (%d own, %d demonstrations; %d skipped: %s), %d steps, loss %.3f -> %.3f in %.1fs",
             len(chosen), own, len(chosen) - own, skipped, dict(data.skipped), len(data.actions), losses[0], losses[-1],
             time.monotonic() - t0)
    return {M.RFT_LOSS: losses[-1], M.RFT_TRAJECTORIES: float(len(chosen)), M.RFT_OWN: float(own),
            M.RFT_SKIPPED: float(skipped), M.RFT_STEPS: float(len(data.actions)), M.RFT_TIME_S: time.monotonic() - t0,
            M.RFT_SOLVED_TASKS: float(len(solved))}

