"""A 500-step game episode (the longest a game may declare, producers.games.registry) through the
whole pipeline on the real broker: its step events -> `flywheel streams` (assembler -> scorer ->
router) -> flywheel.rl.v1 and flywheel.sft.v1 / flywheel.ct.v1 -> the PPO update in chunks -> the
sink -> embedded chDB. Nothing is lost (500 steps, one trajectory, counted once) and every record
fits its topic's max.message.bytes (docs/tasks.md states the limit in steps)."""

from __future__ import annotations

import io
import threading

import numpy as np
import pytest
import torch
from PIL import Image

from consumers.sink import Sink, SinkConfig
from infra.clickhouse.client import make_client
from infra.runtime.policy import build_policy
from infra.runtime.topics import MAX_MESSAGE_BYTES, TOPICS, topic_name
from producers.games import GAMES
from producers.games.registry import ARROWS
from schemas.actions import Hotkey
from schemas.blobs import BlobStore
from schemas.events import EpisodeEnded, EpisodeStarted, Observation, ScoredTrajectory, Step, TaskSpec, Trajectory
from tests.integration.streams_support import STARTUP_S, Collector, produce, start_worker, stop
from trainer.rl.config import TrainConfig
from trainer.rl.intake import to_episode
from trainer.rl.update import collate, ppo_update

pytestmark = pytest.mark.usefixtures("delete_faust_internal_topics")

N_STEPS = 500  # Game.max_steps' bound; the games declare up to max(g.max_steps for g in GAMES.values())
GAME = "games.snake"
THOUGHT = "The snake heads for the food; turning now keeps it clear of its own tail. " * 4  # ~300 chars, as the LM writes


def screens(store: BlobStore, n: int) -> list:
    """``n`` small distinct screenshots in the blob store (the steps carry references only)."""
    rng = np.random.default_rng(0)
    out = []
    for _ in range(n):
        buf = io.BytesIO()
        Image.fromarray(rng.integers(0, 255, (64, 64, 3), dtype=np.uint8)).save(buf, format="PNG")
        out.append(store.put(buf.getvalue(), media_type="image/png", width=64, height=64))
    return out


def game_episode(episode_id: str, refs: list) -> list:
    """One snake episode of N_STEPS arrow-key steps: a step's reward is the score's change."""
    task = TaskSpec(task_id=f"task-{episode_id}", suite="games", name=GAME, max_steps=N_STEPS, submitted_at=1.0)
    events: list = [EpisodeStarted(episode_id=episode_id, ts=99.0, task=task, sandbox="browser", worker_id="w-1",
                                   policy="pixel-games", policy_version=0)]
    score = 0.0
    for i in range(N_STEPS):
        gained = 1.0 if i % 25 == 24 else 0.0
        score += gained
        key = ARROWS[i % 4]
        events.append(Step(
            episode_id=episode_id, ts=100.0 + i, step_index=i, started_at=99.5 + i,
            observation=Observation(screenshot=refs[i % len(refs)], screen_width=64, screen_height=64,
                                    instruction=GAMES[GAME].instruction),
            thought=THOUGHT, action=Hotkey(key=key), raw_output=f"Thought: {THOUGHT}\nAction: hotkey(key='{key}')",
            policy="pixel-games", policy_version=0, logprob=-1.386, value=0.0, reward=gained,
            next_screenshot_sha256=refs[(i + 1) % len(refs)].sha256))
    game = GAMES[GAME]
    events.append(EpisodeEnded(episode_id=episode_id, ts=100.0 + N_STEPS, num_steps=N_STEPS,
                               outcome_reward=(score - game.random_mean) / (game.reference_mean - game.random_mean),
                               success=False, reason="step_budget", score=score,
                               normalised_score=(score - game.random_mean) / (game.reference_mean - game.random_mean)))
    return events


def test_a_500_step_game_episode_flows_through_the_pipeline_whole(settings, group_id, tmp_path):
    assert N_STEPS >= max(g.max_steps for g in GAMES.values())
    store = BlobStore(settings.blob_root)
    events = game_episode("ep-long", screens(store, 8))
    specs = [TOPICS.steps, TOPICS.trajectories, TOPICS.scored, TOPICS.sft, TOPICS.ct, TOPICS.rl, TOPICS.dlq]
    collector = Collector(settings, group_id, specs)
    produce(settings, events)
    worker = start_worker(settings, tmp_path / "worker.log")
    try:
        def routed():
            return [m for spec in (TOPICS.sft, TOPICS.ct) for m in collector.by_topic[topic_name(spec, settings)]]
        collector.wait(lambda: collector.by_topic[topic_name(TOPICS.rl, settings)] and routed(),
                       STARTUP_S, worker, "the RL and the SFT/CT record",
                       lambda: (tmp_path / "worker.log").read_text()[-2000:])
    finally:
        stop(worker)
        collector.close()
    assert worker.returncode == 0, (tmp_path / "worker.log").read_text()[-3000:]

    # every record within its topic's limit; the sizes are the figures docs/tasks.md gives
    sizes = {}
    for spec in specs:
        for m in collector.by_topic[topic_name(spec, settings)]:
            assert len(m.value()) <= spec.max_message_bytes, (spec.name, len(m.value()))
            sizes[spec.name] = max(sizes.get(spec.name, 0), len(m.value()))
    print("largest record per topic (bytes):", sizes)
    # the broker refuses a record over the limit, so the check above alone cannot fail: pin the
    # headroom docs/tasks.md states (a 500-step episode with thoughts is ~0.8 MB, a tenth of it)
    assert max(sizes.values()) < MAX_MESSAGE_BYTES / 8, sizes
    assert collector.by_topic[topic_name(TOPICS.dlq, settings)] == []
    [traj] = collector.values(settings, TOPICS.trajectories, Trajectory)
    assert [s.step_index for s in traj.steps] == list(range(N_STEPS)) and traj.missing_steps == []
    assert traj.score == 20.0 and traj.normalised_score == events[-1].normalised_score
    [rl] = collector.values(settings, TOPICS.rl, ScoredTrajectory)
    assert len(rl.trajectory.steps) == N_STEPS

    # the trainer: the RL record as training data, in rows of at most chunk_steps steps
    cfg = TrainConfig(epochs=1, minibatch_size=250, chunk_steps=128)
    policy = build_policy("pixel", "pixel-games", {"action_types": ["hotkey"], "keys": list(ARROWS), "grid": 4,
                                                   "channels": [4, 8, 8]})
    batch = collate([to_episode(rl, policy, store)], cfg.chunk_steps)
    assert batch.mask.shape == (4, 128) and batch.mask.sum() == N_STEPS
    metrics = ppo_update(policy, torch.optim.Adam(policy.parameters(), lr=1e-3), batch, cfg)
    assert metrics["batch/steps"] == N_STEPS and np.isfinite(metrics["losses/value_loss"])

    # the sink: every step, the trajectory and its scored record once
    Sink(settings, SinkConfig(group_id=group_id + "-sink", exit_when_idle_s=1.5, flush_interval_s=0.5,
                              query_port=-1)).run(threading.Event())
    client = make_client(settings)
    try:
        def count(sql):
            return client.query(sql).result_rows[0][0]
        assert count("SELECT count() FROM steps FINAL WHERE episode_id = 'ep-long'") == N_STEPS
        assert count("SELECT uniqExact(step_index) FROM steps FINAL WHERE episode_id = 'ep-long'") == N_STEPS
        assert count("SELECT count() FROM trajectories FINAL") == 1
        assert count("SELECT num_steps FROM trajectories FINAL") == N_STEPS
        assert count("SELECT episodes FROM v_game_scores WHERE game = 'games.snake'") == 1
        assert count("SELECT mean_score FROM v_game_scores") == 20.0
        assert count("SELECT count() FROM scored FINAL") == 1
        assert count("SELECT count() FROM dead_letters FINAL") == 0
    finally:
        client.close()
