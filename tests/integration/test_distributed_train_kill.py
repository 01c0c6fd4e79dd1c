"""`flywheel train --nproc-per-node 2` on the real broker: rank 1, then rank 0, is SIGKILLed
mid-run, the job stops (exit 1, no rank left behind), and each restart resumes from rank 0's
checkpoint; in the end every episode was trained exactly once (the checkpoint's ledger, its
counters and the published versions say so). The language policy runs on 2 ranks too."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import psutil
import torch
from PIL import Image

from infra.runtime.kafka_clients import DeliveryTracker, flush_or_raise, make_producer
from infra.runtime.policy import PolicyInput, build_policy, load_policy_version
from infra.runtime.topics import TOPICS, topic_name
from infra.runtime.versions import scan as read_versions
from schemas.blobs import BlobStore
from schemas.codec import encode
from schemas.events import Observation, ScoredTrajectory, Step
from infra.runtime.checkpoint import TrainedIds
from tests.unit.lm_samples import scored_episode
from trainer.rl.streaming_ppo import checkpoint_path, load_checkpoint
from tests.fakes.clicks import make_episode, scored_trajectory

ROOT = Path(__file__).resolve().parents[2]
POLICY = "pixel-dist"
POLICY_CONFIG = {"grid": 8, "channels": [8, 16, 16]}


def _produce(settings, records: list[ScoredTrajectory]) -> list[str]:
    producer, tracker = make_producer(settings), DeliveryTracker()
    for st in records:
        producer.produce(topic_name(TOPICS.rl, settings), key=st.episode_id.encode(), value=encode(st),
                         on_delivery=tracker)
    flush_or_raise(producer, tracker)
    return [st.episode_id for st in records]


def pixel_trajectories(settings, n: int) -> list[ScoredTrajectory]:
    store = BlobStore(settings.blob_root)
    policy = build_policy("pixel", POLICY, POLICY_CONFIG)
    rng = np.random.default_rng(0)
    eps = [make_episode("click-test", rng) for _ in range(n)]
    decisions = policy.act([PolicyInput(e.image, e.instruction, 160, 210) for e in eps])
    return [scored_trajectory(e, d.action, d.logprob, f"ep-{k}", POLICY, 0, store)
            for k, (e, d) in enumerate(zip(eps, decisions))]


OWN = [sys.executable, "-m", "app.cli", "train", "--nproc-per-node", "2"]
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
            "-m", "app.cli", "train"]


class Job:
    """One 2-rank `flywheel train` (started by itself, or by torchrun); its output is read as it comes."""

    def __init__(self, settings, group_id: str, max_updates: int, *args: str, launcher: list[str] = OWN) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "FLYWHEEL_DATA_DIR": settings.data_dir,
               "FLYWHEEL_KAFKA_BOOTSTRAP": settings.bootstrap, "FLYWHEEL_TOPIC_PREFIX": settings.topic_prefix}
        cmd = [*launcher, "--group-id", group_id,
               "--max-updates", str(max_updates), "--min-batch", "4", "--max-wait-s", "60", "--epochs", "1",
               "--minibatch-size", "4", "--torch-threads", "1", "--max-staleness", "100",
               "--session-timeout-s", "6", "--dist-timeout-s", "60", *args]
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True)
        self.lines: list[str] = []
        self.reader = threading.Thread(target=lambda: self.lines.extend(self.proc.stdout), daemon=True)
        self.reader.start()

    def line(self, text: str, timeout: float = 60) -> str:
        """The first output line holding ``text`` (waits for it)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.lines):
                if text in line:
                    return line
            time.sleep(0.05)
        raise AssertionError(f"no {text!r} in the output:\n{self.output()}")

    def pid(self, rank: int) -> int:
        return int(self.line(f"rank {rank} pid ").rsplit("pid ", 1)[1])

    def wait(self, timeout: float) -> int:
        code = self.proc.wait(timeout=timeout)
        self.reader.join(timeout=10)
        return code

    def output(self) -> str:
        return "".join(self.lines)[-6000:]


def _wait_for_update(ckpt: Path, n: int, job: Job, timeout: float = 120) -> None:
    """Until the checkpoint holds ``n`` updates; returns the moment a new checkpoint lands."""
    deadline, mtime = time.monotonic() + timeout, None
    while time.monotonic() < deadline and job.proc.poll() is None:
        if ckpt.exists() and ckpt.stat().st_mtime_ns != mtime:
            mtime = ckpt.stat().st_mtime_ns
            if load_checkpoint(ckpt)["updates"] >= n:
                return
        time.sleep(0.005)
    raise AssertionError(f"no checkpoint with {n} updates (exit {job.proc.poll()}):\n{job.output()}")


def _kill_rank_and_expect_the_job_to_stop(job: Job, rank: int) -> None:
    pids = [job.pid(0), job.pid(1)]
    t0 = time.monotonic()
    os.kill(pids[rank], signal.SIGKILL)
    code = job.wait(timeout=60)
    print(f"rank {rank} SIGKILLed: launcher exited {code} after {time.monotonic() - t0:.1f} s")
    assert code == 1, job.output()
    survivors = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    assert not survivors, f"rank(s) {survivors} outlived the job"


def test_ranks_killed_mid_run_train_each_trajectory_exactly_once(settings, group_id):
    t_start = time.monotonic()
    ids = _produce(settings, pixel_trajectories(settings, 24))
    ckpt = checkpoint_path(settings, POLICY)
    args = ("--policy-name", POLICY, "--policy-config", json.dumps(POLICY_CONFIG))

    job = Job(settings, group_id, 6, *args)  # 1. rank 1 dies the moment the 2nd checkpoint lands
    _wait_for_update(ckpt, 2, job)
    _kill_rank_and_expect_the_job_to_stop(job, 1)

    job = Job(settings, group_id, 6, *args)  # 2. rank 0 (the reader) dies after the 4th
    _wait_for_update(ckpt, 4, job)
    _kill_rank_and_expect_the_job_to_stop(job, 0)
    killed_at = load_checkpoint(ckpt)["updates"]

    job = Job(settings, group_id, 6, *args)  # 3. resume to the end
    try:
        assert job.wait(timeout=120) == 0, job.output()
    except subprocess.TimeoutExpired:
        raise AssertionError(job.output())
    assert "trained 6 updates -> version 6, 24 trajectories" in job.output()

    state = load_checkpoint(ckpt)
    trained = TrainedIds.model_validate(state["trained"])
    assert state["updates"] == 6 and 4 <= killed_at < 6
    assert sorted(trained.recent) == sorted(ids), "a trajectory was lost"
    assert trained.total == 24 == 4 * state["updates"], "a trajectory was trained on twice"
    assert state["counts"].get("duplicates_skipped", 0) == 0  # offsets and ledger never disagreed
    versions = read_versions(settings, POLICY)
    assert {v.version for v in versions} == set(range(7))
    load_policy_version(max(versions, key=lambda v: v.version), BlobStore(settings.blob_root))
    print(f"2 kills and 3 launches in {time.monotonic() - t_start:.0f} s")


def lm_trajectories(settings, n: int, policy_name: str) -> list[ScoredTrajectory]:
    """Two-step episodes in the UI-TARS text format (the tiny model's own samples would be random
    bytes); rewards +1 / -1 alternate."""
    store, rng, out = BlobStore(settings.blob_root), np.random.default_rng(0), []
    for k in range(n):
        ep, steps = f"lm-{k}", []
        for i in range(2):
            ref = store.put_image(Image.fromarray(rng.integers(0, 255, (40, 50, 3), dtype=np.uint8)))
            obs = Observation(screenshot=ref, screen_width=50, screen_height=40, instruction="Click the button.")
            steps.append(Step(episode_id=ep, ts=1.0 + i, step_index=i, started_at=1.0 + i, observation=obs,
                              raw_output=f"Thought: button {k}\nAction: click(start_box='({k},{i})')",
                              parse_error="not parsed in this test", policy=policy_name, policy_version=0,
                              logprob=-40.0, done=i == 1))
        out.append(scored_episode(ep, steps, 1.0 if k % 2 == 0 else -1.0, policy_name))
    return out


def test_language_policy_trains_on_two_ranks(settings, group_id):
    name, config = "lm-dist", {"max_new_tokens": 16, "seed": 0}
    _produce(settings, lm_trajectories(settings, 4, name))
    job = Job(settings, group_id, 1, "--policy-kind", "lm", "--pretrained", "", "--policy-name", name,
              "--policy-config", json.dumps(config), "--lr", "1e-4")
    assert job.wait(timeout=240) == 0, job.output()
    assert "trained 1 updates -> version 1, 4 trajectories" in job.output()
    versions = {v.version: v for v in read_versions(settings, name)}
    assert sorted(versions) == [0, 1] and versions[1].kind == "lm"
    store = BlobStore(settings.blob_root)
    v0, v1 = (load_policy_version(versions[v], store) for v in (0, 1))
    assert any(not torch.equal(a, b) for a, b in zip(v0.state_dict().values(), v1.state_dict().values()))


def test_torchrun_starts_the_same_trainer(settings, group_id):
    """torchrun's ranks (RANK, WORLD_SIZE, MASTER_* in their environment) play the same parts."""
    ids = _produce(settings, pixel_trajectories(settings, 8))
    job = Job(settings, group_id, 2, "--policy-name", POLICY, "--policy-config", json.dumps(POLICY_CONFIG),
              launcher=TORCHRUN)
    try:
        assert job.wait(timeout=120) == 0, job.output()
    except subprocess.TimeoutExpired:
        raise AssertionError(job.output())
    assert "trained 2 updates -> version 2, 8 trajectories" in job.output()
    assert "rank 1 of 2 joined" in job.output()
    state = load_checkpoint(checkpoint_path(settings, POLICY))
    assert sorted(TrainedIds.model_validate(state["trained"]).recent) == sorted(ids)


def test_followers_outlive_a_wait_for_data_longer_than_the_timeout(settings, group_id):
    """Rank 0 waits for trajectories 2.5 times the collective timeout: its keep-alives hold the
    followers, and the update runs once the data arrives."""
    job = Job(settings, group_id, 1, "--policy-name", POLICY, "--policy-config", json.dumps(POLICY_CONFIG),
              "--dist-timeout-s", "6")
    job.line("published random init")  # from here on rank 1 waits for rank 0's first order
    time.sleep(15)
    assert job.proc.poll() is None, job.output()
    _produce(settings, pixel_trajectories(settings, 4))
    try:
        assert job.wait(timeout=120) == 0, job.output()
    except subprocess.TimeoutExpired:
        raise AssertionError(job.output())
    assert "trained 1 updates -> version 1, 4 trajectories" in job.output()
