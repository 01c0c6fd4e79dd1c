"""Streaming trainer figures on the real broker: update time per batch and idle fraction.

A feeder thread produces synthetic click-test ScoredTrajectories to flywheel.rl.v1 at a steady
rate (a stand-in for rollout workers) while ``trainer.rl.streaming_ppo.train`` consumes them; prints the
pixel policy's update time per batch and the trainer's idle fraction (time waiting for data /
wall time), next to the feed rate. Uses the local broker (`flywheel up`) and throw-away topics.

    python -m benchmarks.bench_trainer --rate 8 --updates 10
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import numpy as np
import torch


from infra.runtime.admin import delete_topics, ensure_topics
from infra.runtime.kafka_clients import DeliveryTracker, flush_or_raise, make_producer
from infra.runtime.settings import load_settings
from infra.runtime.topics import TOPICS, topic_name
from schemas.blobs import BlobStore
from schemas.codec import encode
from trainer.core import metric_names as M
from trainer.rl.config import TrainConfig
from infra.runtime.policy import build_policy
from infra.runtime.policy import PolicyInput
from infra.runtime.versions import scan as read_versions
from trainer.rl.streaming_ppo import train
from benchmarks.fakes import make_episode, scored_trajectory  # test fakes: benchmarks/fakes.py


def feed(settings, policy_name: str, rate: float, stop: threading.Event) -> None:
    """Produce one trajectory every 1/rate seconds, acting with the latest published version."""
    store = BlobStore(settings.blob_root)
    policy = build_policy("pixel", policy_name, {})
    rng = np.random.default_rng(0)
    producer, tracker = make_producer(settings), DeliveryTracker()
    k, t_next = 0, time.monotonic()
    while not stop.is_set():
        e = make_episode("click-test", rng)
        d = policy.act([PolicyInput(e.image, e.instruction, 160, 210)])[0]
        st = scored_trajectory(e, d.action, d.logprob, f"bench-{k}", policy_name, policy.version, store)
        producer.produce(topic_name(TOPICS.rl, settings), key=st.episode_id.encode(), value=encode(st), on_delivery=tracker)
        producer.poll(0)
        k += 1
        t_next += 1.0 / rate
        time.sleep(max(0.0, t_next - time.monotonic()))
    flush_or_raise(producer, tracker)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=float, default=8.0, help="trajectories per second fed to the trainer")
    ap.add_argument("--updates", type=int, default=10)
    ap.add_argument("--min-batch", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1, help="torch threads of the trainer")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        settings = load_settings({"data_dir": tmp, "topic_prefix": f"bench{uuid.uuid4().hex[:8]}.", "max_staleness": 1000})
        report = ensure_topics(settings)
        stop = threading.Event()
        feeder = threading.Thread(target=feed, args=(settings, "bench-pixel", args.rate, stop), daemon=True)
        try:
            feeder.start()
            cfg = TrainConfig(policy_name="bench-pixel", min_batch=args.min_batch, max_updates=args.updates,
                              max_wait_s=60.0)
            t0 = time.monotonic()
            summary = train(cfg, settings)
            wall = time.monotonic() - t0
            versions = read_versions(settings, "bench-pixel")
        finally:
            stop.set()
            feeder.join(timeout=30)
            delete_topics(settings, report.created)
    update_times = [v.metrics[M.UPDATE_TIME_S] for v in versions if M.UPDATE_TIME_S in v.metrics]
    print(json.dumps({
        "feed_rate_traj_per_s": args.rate, "min_batch": args.min_batch, "updates": summary["updates"],
        "update_time_s_per_batch_mean": round(float(np.mean(update_times)), 3),
        "update_time_s_per_batch_max": round(float(np.max(update_times)), 3),
        "idle_fraction": round(summary["idle_fraction"], 3), "wall_s": round(wall, 1),
        "trained_traj_per_s": round(summary["trained"] / wall, 2),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
