"""The served verifier as the streams' judge on the real broker: a trajectory of a task it decides
is scored with its score; once it is killed mid-run, the next one is dead-lettered at the scorer
(HttpJudge's retries spent), never scored by the page's verdict or as a zero."""

from __future__ import annotations

import io
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
import torch
from PIL import Image

from infra.runtime.topics import TOPICS, topic_name
from schemas.blobs import BlobStore
from schemas.events import DeadLetter, EpisodeEnded, EpisodeStarted, ScoredTrajectory, Trajectory
from streams.judge import judge_request
from tests.fakes.steps import step, task
from tests.integration.streams_support import ROOT, STARTUP_S, Collector, produce, start_worker, stop
from trainer.verifier.dataset import example_from_request
from trainer.verifier.features import featurize, stack
from trainer.verifier.model import VerifierNet, predict
from trainer.verifier.train import save

pytestmark = pytest.mark.usefixtures("delete_faust_internal_topics")


def png(color) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (40, 50), color).save(buf, "PNG")
    return buf.getvalue()


def episode(episode_id: str, screens: list[str], success: bool) -> list:
    """An episode whose screenshots are in the blob store (the verifier reads them)."""
    events: list = [EpisodeStarted(episode_id=episode_id, ts=99.0, task=task(f"task-{episode_id}"), sandbox="browser",
                                   worker_id="w-1", policy="pixel-ppo", policy_version=0)]
    events += [step(episode_id, i, ts=100.0 + i, screen=screens[i], next_screen=screens[i + 1])
               for i in range(len(screens) - 1)]
    events.append(EpisodeEnded(episode_id=episode_id, ts=110.0, num_steps=len(screens) - 1,
                               outcome_reward=1.0 if success else -1.0, success=success))
    return events


def start_verifier(settings, model_path, port: int, log_path) -> subprocess.Popen:
    env = dict(os.environ, FLYWHEEL_DATA_DIR=settings.data_dir)
    log = open(log_path, "ab")
    return subprocess.Popen(["nice", "-n", "10", sys.executable, "-m", "app.cli", "verifier", "serve",
                             "--model", str(model_path), "--port", str(port)],
                            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)


def wait_healthy(port: int, proc: subprocess.Popen, timeout: float = 120.0) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"the verifier exited with {proc.returncode} before serving")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    pytest.fail(f"the verifier did not answer on port {port} within {timeout:.0f}s")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_killed_verifier_dead_letters_the_trajectory(settings, group_id, tmp_path):
    store = BlobStore(settings.blob_root)
    screens = [store.put(png(c)).sha256 for c in ((10, 10, 10), (200, 10, 10), (10, 200, 10))]
    torch.manual_seed(0)
    model = VerifierNet(side=16, buckets=64)
    save(tmp_path / "verifier.pt", model, 0.5, ["other-task"], ["click-test"])
    port = free_port()
    verifier = start_verifier(settings, tmp_path / "verifier.pt", port, tmp_path / "verifier.log")
    worker = None
    collector = Collector(settings, group_id, [TOPICS.trajectories, TOPICS.scored, TOPICS.dlq])
    try:
        wait_healthy(port, verifier)
        worker = start_worker(settings, tmp_path / "worker.log", judge_url=f"http://127.0.0.1:{port}/score",
                              judge_tasks="*", judge_timeout_s=2)
        produce(settings, episode("ep-judged", screens, success=True))

        def scored():
            return {s.episode_id: s for s in collector.values(settings, TOPICS.scored, ScoredTrajectory)}
        collector.wait(lambda: "ep-judged" in scored(), STARTUP_S + 60, worker, "the judged trajectory's score")
        judged = scored()["ep-judged"]
        expected = float(predict(model, stack([featurize(example_from_request(judge_request(judged.trajectory)),
                                                         store.get, 16, 64)]))[0])
        assert "outcome" not in judged.components
        assert judged.components["judge_outcome"] == pytest.approx(2 * expected - 1, abs=1e-5)

        verifier.send_signal(signal.SIGKILL)
        verifier.wait(10)
        produce(settings, episode("ep-unjudged", screens, success=True))

        def letters():
            return [d for d in collector.values(settings, TOPICS.dlq, DeadLetter) if d.stage == "scorer"]
        collector.wait(lambda: letters(), 90, worker, "the scorer's dead letter")
        [letter] = letters()
        assert letter.source_topic == topic_name(TOPICS.trajectories, settings)
        assert "failed 3 times" in letter.message
        assert "ep-unjudged" in {t.episode_id for t in collector.values(settings, TOPICS.trajectories, Trajectory)}
        time.sleep(3)  # a scored copy would have come with the letter
        assert "ep-unjudged" not in scored() and worker.poll() is None
    finally:
        collector.close()
        if worker is not None:
            stop(worker)
        if verifier.poll() is None:
            verifier.kill()
            verifier.wait(10)
