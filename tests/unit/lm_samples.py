"""Trajectories a tiny language policy (v0) could have written, for PPO tests of the language
policy: two-step episodes rewarded +1 (even) or -1 (odd), each step's behaviour log-prob v0's own."""

from __future__ import annotations

import numpy as np
import torch
from PIL import Image

from infra.runtime.policy import PolicyInput
from schemas.blobs import BlobStore
from schemas.events import Observation, ScoredTrajectory, Step, TaskSpec, Trajectory

POLICY = "lm-ppo-test"
CONFIG = {"max_new_tokens": 16, "seed": 0}


def rollout(policy, store: BlobStore, n: int) -> list[ScoredTrajectory]:
    """Two-step episodes acted by ``policy`` (v0) exactly as a rollout worker does: the second
    decision sees the first step's screenshot and output; reward +1 for even episodes, -1 odd."""
    rng = np.random.default_rng(0)
    policy.blob_store = store
    out = []
    for k in range(n):
        ep, steps = f"ep-{k}", []
        for i in range(2):
            img = rng.integers(0, 255, (40, 50, 3), dtype=np.uint8)
            ref = store.put_image(Image.fromarray(img))
            inp = PolicyInput(img, "Click the button.", 50, 40, history=list(steps))
            d = write(policy, inp, rng)
            obs = Observation(screenshot=ref, screen_width=50, screen_height=40, instruction="Click the button.")
            steps.append(Step(episode_id=ep, ts=1.0 + i, step_index=i, started_at=1.0 + i, observation=obs,
                              thought=d.thought, action=d.action, raw_output=d.raw_output, parse_error=d.parse_error,
                              policy=POLICY, policy_version=0, logprob=d.logprob, value=d.value, done=i == 1))
        out.append(scored_episode(ep, steps, 1.0 if k % 2 == 0 else -1.0, POLICY))
    return out


def scored_episode(ep: str, steps: list[Step], reward: float, policy: str) -> ScoredTrajectory:
    """``steps`` as one ended click-test episode of ``policy``, scored ``reward`` and routed to RL."""
    task = TaskSpec(task_id=f"task-{ep}", suite="miniwob", name="click-test", submitted_at=1.0)
    traj = Trajectory(episode_id=ep, task=task, sandbox="browser", worker_id="w", policy=policy, steps=steps,
                      status="ended", outcome_reward=reward, success=reward > 0, started_at=1.0, ended_at=3.0)
    return ScoredTrajectory(trajectory=traj, scorer="rule-v1", scorer_version="1", reward=reward,
                            components={"outcome": reward}, verdict=int(reward > 0), rl_eligible=True,
                            routes=["rl"], scored_at=4.0)


def write(policy, inp: PolicyInput, rng: np.random.Generator):
    """A UI-TARS decision as v0 writes it. A random tiny model samples random bytes, and random
    bytes share nothing an update could tell apart; so the text is drawn here, and its behaviour
    log-prob is v0's own log-prob of those tokens in this context (what ``act`` reports when it
    rescores a sample), so the trajectory is exactly one v0 could have written."""
    from infra.runtime.policy import Decision

    x, y = rng.integers(0, 50), rng.integers(0, 40)
    text = f"Thought: the button at {x},{y}\nAction: click(start_box='({x},{y})')"
    (_, lps), = policy.response_logprobs([policy.context(inp)], [text])
    return Decision(None, float(sum(lps)), 0.0, "", text, "not parsed in this test")


def step_logprobs(policy, scored: list[ScoredTrajectory], store: BlobStore) -> np.ndarray:
    with torch.no_grad():
        return np.array([[float(lp) for lp in policy.evaluate(policy.step_inputs(s.trajectory, store))[0]]
                         for s in scored])
