"""Synthetic episodes for tests and benchmarks: valid step events without a sandbox.

``episode_events(episode_id, n_steps, ...)`` returns the in-order events of one episode
(started, steps, ended or aborted). Screenshot refs point at fake hashes; nothing is read.
"""

from __future__ import annotations

import hashlib

from schemas.actions import Click, Type
from schemas.events import (BlobRef, EpisodeAborted, EpisodeEnded, EpisodeStarted, Observation, Step,
                            TaskSpec)


def fake_sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def blob(sha: str) -> BlobRef:
    return BlobRef(sha256=sha, uri=f"file:///blobs/{sha[:2]}/{sha}", width=160, height=210)


def task(task_id: str = "t-1", max_steps: int = 10) -> TaskSpec:
    return TaskSpec(task_id=task_id, suite="miniwob", name="click-test", max_steps=max_steps, submitted_at=1.0)


def step(episode_id: str, i: int, *, ts: float | None = None, policy_version: int = 0, action=None,
         screen: str | None = None, next_screen: str | None = None, parse_error: str | None = None) -> Step:
    screen = screen or fake_sha(f"{episode_id}:{i}")
    next_screen = next_screen or fake_sha(f"{episode_id}:{i + 1}")
    if action is None and parse_error is None:
        action = Click(x=0.5, y=0.25) if i % 2 == 0 else Type(content="hello")
    return Step(
        episode_id=episode_id, ts=ts if ts is not None else 100.0 + i, step_index=i, started_at=99.5 + i,
        observation=Observation(screenshot=blob(screen), screen_width=160, screen_height=210, instruction="click"),
        thought=f"thought {i}", action=action, raw_output="Action: click(start_box='(1,2)')",
        parse_error=parse_error, policy="pixel-ppo", policy_version=policy_version, logprob=-1.25,
        value=0.1, reward=0.0, next_screenshot_sha256=next_screen,
    )


def episode_events(episode_id: str, n_steps: int = 3, *, success: bool = True, aborted: bool = False,
                   infra_failure: bool = False, policy_version: int = 0, max_steps: int = 10,
                   t0: float = 100.0) -> list:
    events: list = [EpisodeStarted(
        episode_id=episode_id, ts=t0 - 1, task=task(f"task-{episode_id}", max_steps), sandbox="browser",
        worker_id="w-1", policy="pixel-ppo", policy_version=policy_version,
    )]
    events += [step(episode_id, i, ts=t0 + i, policy_version=policy_version) for i in range(n_steps)]
    if aborted:
        events.append(EpisodeAborted(episode_id=episode_id, ts=t0 + n_steps, num_steps=n_steps,
                                     reason="browser crashed" if infra_failure else "policy error",
                                     infra_failure=infra_failure))
    else:
        events.append(EpisodeEnded(episode_id=episode_id, ts=t0 + n_steps, num_steps=n_steps,
                                   outcome_reward=1.0 if success else 0.0, success=success))
    return events
