"""Helpers for tests that run `flywheel rollout` as a child process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson


def start_random_rollout(settings, group_id: str, worker_id: str, sandboxes: int, **env) -> tuple[subprocess.Popen, Path]:
    """`flywheel rollout` with the random policy as a subprocess; -> it and its status file."""
    env = {**os.environ, "FLYWHEEL_KAFKA_BOOTSTRAP": settings.bootstrap, "FLYWHEEL_TOPIC_PREFIX": settings.topic_prefix,
           "FLYWHEEL_DATA_DIR": settings.data_dir, **env}
    proc = subprocess.Popen([sys.executable, "-m", "app.cli", "rollout", "--sandboxes", str(sandboxes),
                             "--policy-backend", "random", "--policy-name", "random", "--group-id", group_id,
                             "--worker-id", worker_id, "--status-interval-s", "0.5", "--no-reload"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    return proc, Path(settings.data_dir) / "rollout" / f"{worker_id}.json"


def wait_for_episodes(status_file: Path, n: int, timeout: float) -> bool:
    end = time.time() + timeout
    while time.time() < end:
        if status_file.exists() and orjson.loads(status_file.read_bytes())["episodes"] >= n:
            return True
        time.sleep(0.3)
    return False


def stop_with_sigterm(proc: subprocess.Popen, timeout: float = 60) -> str:
    """SIGTERM ``proc``, wait for it to exit (kill it if it does not) and return its output."""
    try:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
    return out.decode()
