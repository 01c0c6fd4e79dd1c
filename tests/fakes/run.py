"""Synthetic but valid events for tests, benchmarks and the analytics docs.

``synthetic_run(n_episodes, seed)`` yields what a short run would put on the sink's topics:
episode events, trajectories, scored trajectories, policy versions and trainer metrics. The
screenshots are references only (no blob is written).
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field
from typing import Any

from schemas.actions import Click, Finished, Hotkey, Scroll, Type
from schemas.events import (
    BlobRef, EpisodeAborted, EpisodeEnded, EpisodeStarted, Observation, PolicyVersion, ScoredTrajectory, Step,
    TaskSpec, TrainerMetrics, Trajectory,
)

TASKS = ("click-test", "click-button", "enter-text", "focus-text")
T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z: fixed so the docs' output is reproducible


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def blob(text: str) -> BlobRef:
    digest = sha(text)
    return BlobRef(sha256=digest, uri=f"file://blobs/{digest[:2]}/{digest}.png", width=160, height=210)


def _action(rng: random.Random, last: bool, success: bool):
    if last and success:
        return Finished(content="done")
    return rng.choice([
        Click(x=round(rng.random(), 3), y=round(rng.random(), 3)),
        Click(x=round(rng.random(), 3), y=round(rng.random(), 3)),
        Type(content="hello"),
        Scroll(x=0.5, y=0.5, direction="down"),
        Hotkey(key="ctrl a"),
    ])


def episode(episode_id: str, task: str, policy_version: int, n_steps: int, success: bool, t: float,
            rng: random.Random, policy: str = "pixel-ppo", aborted: bool = False) -> list[Any]:
    """started, ``n_steps`` steps, then ended (or aborted) for one episode."""
    spec = TaskSpec(task_id=f"task-{episode_id}", suite="miniwob", name=task, seed=rng.randrange(1000),
                    max_steps=10, submitted_at=t)
    events: list[Any] = [EpisodeStarted(episode_id=episode_id, ts=t, task=spec, sandbox="browser",
                                         worker_id="worker-0", policy=policy, policy_version=policy_version)]
    for i in range(n_steps):
        last = i == n_steps - 1
        thought = " ".join(["look", "at", "the", "screen"] * rng.randint(1, 2 + policy_version))
        parse_fail = rng.random() < 0.05
        events.append(Step(
            episode_id=episode_id, ts=t + i + 0.9, step_index=i, started_at=t + i,
            observation=Observation(screenshot=blob(f"{episode_id}/{i}"), screen_width=160, screen_height=210,
                                    instruction=f"Do {task}"),
            thought=thought, action=None if parse_fail else _action(rng, last, success),
            raw_output=f"Thought: {thought}\nAction: ...", parse_error="no action" if parse_fail else None,
            policy=policy, policy_version=policy_version, logprob=-rng.random(), value=rng.random(),
            reward=1.0 if (last and success) else 0.0, done=last, latency_policy_ms=12.0, latency_env_ms=30.0,
            next_screenshot_sha256=sha(f"{episode_id}/{i + 1}"),
        ))
    end_ts = t + n_steps + 1
    if aborted:
        events.append(EpisodeAborted(episode_id=episode_id, ts=end_ts, num_steps=n_steps,
                                     reason="browser crashed", infra_failure=True))
    else:
        events.append(EpisodeEnded(episode_id=episode_id, ts=end_ts, num_steps=n_steps,
                                   outcome_reward=1.0 if success else 0.0, success=success,
                                   reason="done" if success else "step_budget"))
    return events


def trajectory(events: list[Any]) -> Trajectory:
    started, *steps, end = events
    aborted = isinstance(end, EpisodeAborted)
    return Trajectory(
        episode_id=started.episode_id, task=started.task, sandbox=started.sandbox, worker_id=started.worker_id,
        policy=started.policy, steps=steps, status="aborted" if aborted else "ended",
        outcome_reward=0.0 if aborted else end.outcome_reward, success=False if aborted else end.success,
        end_reason=end.reason, infra_failure=aborted and end.infra_failure,
        started_at=started.ts, ended_at=end.ts,
    )


def scored(traj: Trajectory, scorer: str = "rule", scorer_version: str = "1", staleness_ok: bool = True) -> ScoredTrajectory:
    outcome = traj.outcome_reward
    fmt = -0.1 * sum(1 for s in traj.steps if s.parse_error)
    length = -0.01 * len(traj.steps)
    verdict = 1 if traj.success else 0
    eligible = not traj.infra_failure and staleness_ok
    routes = ["sft" if verdict else "ct"] + (["rl"] if eligible else [])
    return ScoredTrajectory(
        trajectory=traj, scorer=scorer, scorer_version=scorer_version, reward=round(outcome + fmt + length, 6),
        components={"outcome": outcome, "format": fmt, "length": length}, verdict=verdict, rl_eligible=eligible,
        routes=routes, route_reasons=[] if eligible else ["infra_failure"], scored_at=traj.ended_at + 0.5,
    )


@dataclass
class SyntheticRun:
    episode_events: list[Any] = field(default_factory=list)
    trajectories: list[Trajectory] = field(default_factory=list)
    scored: list[ScoredTrajectory] = field(default_factory=list)
    policies: list[PolicyVersion] = field(default_factory=list)
    metrics: list[TrainerMetrics] = field(default_factory=list)


def synthetic_run(n_episodes: int = 24, seed: int = 0, versions: int = 3, t0: float = T0) -> SyntheticRun:
    """Episodes spread over ``versions`` policy versions; success rises with the version."""
    rng = random.Random(seed)
    run = SyntheticRun()
    for v in range(versions):
        run.policies.append(PolicyVersion(policy="pixel-ppo", version=v, kind="pixel", uri=f"file://policies/v{v}",
                                          sha256=sha(f"v{v}"), parent=v - 1 if v else None,
                                          created_at=t0 + v * 60.0,
                                          metrics={"losses/pg_loss": round(1.0 / (v + 1), 4)}))
        run.metrics.append(TrainerMetrics(run_id="run-1", update=v, policy="pixel-ppo", policy_version=v,
                                          ts=t0 + v * 60.0, metrics={"losses/pg_loss": round(1.0 / (v + 1), 4),
                                                                     "losses/approx_kl": 0.01 * v}))
    for i in range(n_episodes):
        # behaviour version lags behind the trainer now and then: that is the staleness histogram
        t = t0 + i * (versions * 60.0 / n_episodes)
        current = min(versions - 1, int(i * versions / n_episodes))
        version = max(0, current - (1 if rng.random() < 0.25 else 0))
        success = rng.random() < 0.3 + 0.25 * version
        events = episode(f"ep-{seed}-{i:04d}", rng.choice(TASKS), version, rng.randint(1, 6), success, t, rng,
                         aborted=rng.random() < 0.05)
        run.episode_events.extend(events)
        traj = trajectory(events)
        run.trajectories.append(traj)
        run.scored.append(scored(traj))
    return run


def publish(settings, run: SyntheticRun, copies: int = 1) -> int:
    """Produce the run to its topics (``copies`` > 1 re-sends everything: a replay); returns count."""
    # local: loads confluent-kafka, needed only on this path
    from infra.runtime.kafka_clients import DeliveryTracker, flush_or_raise, make_producer
    from infra.runtime.topics import TOPICS, topic_name
    from schemas.codec import encode

    producer, tracker = make_producer(settings), DeliveryTracker()
    batches = [
        (TOPICS.steps, run.episode_events, lambda e: e.episode_id),
        (TOPICS.trajectories, run.trajectories, lambda e: e.episode_id),
        (TOPICS.scored, run.scored, lambda e: e.episode_id),
        (TOPICS.policy, run.policies, lambda e: e.policy),
        (TOPICS.metrics, run.metrics, lambda e: e.run_id),
    ]
    sent = 0
    for _ in range(copies):
        for spec, events, key in batches:
            name = topic_name(spec, settings)
            for event in events:
                producer.produce(name, key=key(event).encode(), value=encode(event), on_delivery=tracker)
                producer.poll(0)
                sent += 1
    flush_or_raise(producer, tracker)
    return sent
