"""A tiny offline stand-in for MiniWoB click-test / click-test-2, for tuning and tests.

Renders the 160 x 210 task area (a 50 px instruction bar, then the page) with buttons at random
positions; one click ends the episode with reward 1 inside the target button, else 0. Numpy and
PIL only: no browser, so the learning loop can be checked anywhere in seconds.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageDraw
from schemas.events import Observation, ScoredTrajectory, Step, TaskSpec, Trajectory

W, H, BAR = 160, 210, 50


@dataclass
class ClickEpisode:
    image: np.ndarray  # H x W x 3 uint8
    instruction: str
    target: tuple[int, int, int, int]  # x0, y0, x1, y1 pixels of the button to click

    def reward(self, x: float, y: float) -> float:
        """x, y normalised to the task area, as in a Click."""
        px, py = x * W, y * H
        x0, y0, x1, y1 = self.target
        return 1.0 if x0 <= px < x1 and y0 <= py < y1 else 0.0


def _button(rng: np.random.Generator, label: str, avoid: list[tuple[int, int, int, int]]) -> tuple[int, int, int, int]:
    w, h = 8 + 7 * len(label) + int(rng.integers(0, 8)), int(rng.integers(20, 27))
    for _ in range(100):
        x0, y0 = int(rng.integers(2, W - w - 2)), int(rng.integers(BAR + 2, H - h - 2))
        box = (x0, y0, x0 + w, y0 + h)
        if all(box[2] + 4 <= a[0] or a[2] + 4 <= box[0] or box[3] + 4 <= a[1] or a[3] + 4 <= box[1] for a in avoid):
            return box
    raise RuntimeError("could not place a button")


def make_episode(task: str, rng: np.random.Generator) -> ClickEpisode:
    """``task``: "click-test" (one "Click Me!" button) or "click-test-2" (buttons ONE and TWO)."""
    img = Image.new("RGB", (W, H), (255, 255, 255))
    draw = ImageDraw.Draw(img)
    draw.rectangle((0, 0, W - 1, BAR - 1), fill=(255, 255, 0))
    if task == "click-test":
        labels, target_label, instruction = ["Click Me!"], "Click Me!", "Click the button."
    elif task == "click-test-2":
        labels = ["ONE", "TWO"]
        target_label = labels[int(rng.integers(0, 2))]
        instruction = f"Click button {target_label}."
    else:
        raise ValueError(f"unknown synthetic task {task!r}")
    draw.text((4, 4), instruction, fill=(0, 0, 0))
    boxes: list[tuple[int, int, int, int]] = []
    target = None
    for label in labels:
        box = _button(rng, label, boxes)
        boxes.append(box)
        draw.rectangle(box, fill=(239, 239, 239), outline=(118, 118, 118))
        draw.text((box[0] + 4, box[1] + (box[3] - box[1]) // 2 - 5), label, fill=(0, 0, 0))
        if label == target_label:
            target = box
    assert target is not None
    return ClickEpisode(np.asarray(img, dtype=np.uint8), instruction, target)


def scored_trajectory(episode: ClickEpisode, action, logprob: float, episode_id: str, policy_name: str,
                      policy_version: int, store, ts: float = 1.0e9):
    """Wrap one synthetic click episode as the ScoredTrajectory the rl topic carries (its
    screenshot stored in ``store``), for tests and benchmarks of the streaming trainer."""

    ref = store.put_image(Image.fromarray(episode.image))
    reward = episode.reward(action.x, action.y)
    task = TaskSpec(task_id=f"task-{episode_id}", suite="miniwob", name="click-test", submitted_at=ts)
    step = Step(episode_id=episode_id, ts=ts, step_index=0, started_at=ts,
                observation=Observation(screenshot=ref, screen_width=W, screen_height=H, instruction=episode.instruction),
                action=action, policy=policy_name, policy_version=policy_version, logprob=logprob,
                reward=reward, done=True)
    traj = Trajectory(episode_id=episode_id, task=task, sandbox="synthetic", worker_id="w0", policy=policy_name,
                      steps=[step], status="ended", outcome_reward=reward, success=reward > 0,
                      started_at=ts, ended_at=ts)
    return ScoredTrajectory(trajectory=traj, scorer="rule-v1", scorer_version="1", reward=reward,
                            components={"outcome": reward}, verdict=1 if reward > 0 else 0, rl_eligible=True,
                            routes=["rl"], scored_at=ts)


def learn(task: str, target: float, max_episodes: int, cfg, log_every: int = 0) -> dict:
    """Offline PPO on the synthetic task: act on ``cfg.min_batch`` episodes with the current
    policy, one ``ppo_update``, repeat, until the last 100 sampled episodes reach ``target``."""
    import torch

    # local: loads confluent-kafka, torch, needed only on this path
    from infra.runtime.policy import build_policy
    from infra.runtime.policy import PolicyInput
    from trainer.core import metric_names as M
    from trainer.rl.update import EpisodeSample, collate, ppo_update

    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    policy = build_policy("pixel", "synthetic", cfg.policy_overrides())
    optimizer = torch.optim.Adam(policy.parameters(), lr=cfg.lr)
    recent: deque[float] = deque(maxlen=100)
    t0, episodes, update_times, act_times = time.perf_counter(), 0, [], []
    reached = None
    while episodes < max_episodes:
        eps = [make_episode(task, rng) for _ in range(cfg.min_batch)]
        ta = time.perf_counter()
        decisions = policy.act([PolicyInput(e.image, e.instruction, 160, 210) for e in eps])
        act_times.append((time.perf_counter() - ta) / len(eps))
        samples = []
        for k, (e, d) in enumerate(zip(eps, decisions)):
            r = e.reward(d.action.x, d.action.y)
            recent.append(r)
            samples.append(EpisodeSample(f"e{episodes + k}", [policy.preprocess(e.image, (), e.instruction)], [e.instruction],
                                         [d.action], [d.logprob], [r], policy.version))
        episodes += len(eps)
        if reached is None and len(recent) == 100 and np.mean(recent) >= target:
            reached = {"episodes": episodes, "seconds": round(time.perf_counter() - t0, 1)}
            break
        m = ppo_update(policy, optimizer, collate(samples), cfg)
        policy.version += 1
        update_times.append(m[M.UPDATE_TIME_S])
        if log_every and policy.version % log_every == 0:
            print(f"  v{policy.version} episodes={episodes} success@100={np.mean(recent):.2f} "
                  f"entropy={m[M.ENTROPY]:.2f} clip={m[M.CLIP_FRAC]:.2f} t={time.perf_counter() - t0:.0f}s", flush=True)
    return {"task": task, "target": target, "reached": reached, "episodes": episodes,
            "final_success_last100": round(float(np.mean(recent)), 3),
            "update_time_s_per_batch": round(float(np.mean(update_times)), 4) if update_times else None,
            "act_ms_per_step": round(1000 * float(np.mean(act_times)), 2),
            "batch": cfg.min_batch, "wall_s": round(time.perf_counter() - t0, 1)}


