"""Shared builders for the serving / SFT / CT tests: scored trajectories with real screenshots."""

from __future__ import annotations

import numpy as np
from PIL import Image

from schemas.actions import Click, Finished
from schemas.blobs import BlobStore
from schemas.events import Observation, ScoredTrajectory, Step, TaskSpec, Trajectory


def scored_trajectory(store: BlobStore, episode: str, n_steps: int = 2, seed: int = 0) -> ScoredTrajectory:
    rng = np.random.default_rng(seed)
    task = TaskSpec(task_id=f"task-{episode}", suite="miniwob", name="click-test", submitted_at=1.0)
    steps = []
    for i in range(n_steps):
        ref = store.put_image(Image.fromarray(rng.integers(0, 255, (40, 50, 3), dtype=np.uint8)))
        obs = Observation(screenshot=ref, screen_width=50, screen_height=40, instruction="Click the button.")
        last = i == n_steps - 1
        action = Finished(content="") if last else Click(x=0.5, y=0.5)
        raw = "Thought: done\nAction: finished(content='')" if last else \
            "Thought: the button\nAction: click(point='<point>25 20</point>')"
        steps.append(Step(episode_id=episode, ts=1.0 + i, step_index=i, started_at=1.0 + i, observation=obs,
                          thought=raw.split("\n")[0][9:], action=action, raw_output=raw, policy="lm-t",
                          policy_version=0, logprob=-3.0, reward=1.0 if last else 0.0, done=last))
    traj = Trajectory(episode_id=episode, task=task, sandbox="browser", worker_id="w", policy="lm-t", steps=steps,
                      status="ended", outcome_reward=1.0, success=True, started_at=1.0, ended_at=2.0 + n_steps)
    return ScoredTrajectory(trajectory=traj, scorer="outcome", scorer_version="1", reward=1.0,
                            components={"outcome": 1.0}, verdict=1, rl_eligible=True, routes=["sft"],
                            scored_at=10.0)
