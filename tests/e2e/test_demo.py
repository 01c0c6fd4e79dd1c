"""A short `flywheel demo` run end to end: browser sandboxes, Faust, sink, trainer, hot reload,
through the main job's phases (cold start -> SFT -> value pretraining -> PPO) on the quick suite,
until PPO published three versions (`--until-version 3`; about a minute).

It asserts what a new user should see: the scripted annotator's demonstrations were scored and
cloned into pi_sft (version 0), the trainer pretrained its critic on pi_sft's rollouts without
publishing, then published PPO versions a rollout worker acted with (hot reload); episodes flowed
through every topic into ClickHouse, the report has the phase table, and nothing reached the
dead-letter topic.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _sql(env: dict, statement: str) -> list[dict]:
    out = subprocess.run([sys.executable, "-m", "app.cli", "sql", "--format", "json", statement],
                         env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    return data if isinstance(data, list) else data.get("rows", data.get("data", []))


def _high_watermarks(settings, names: list[str]) -> dict[str, int]:
    from confluent_kafka import Consumer, TopicPartition

    from infra.runtime.kafka_clients import consumer_config

    c = Consumer(consumer_config(settings, "watermarks"))
    try:
        out = {}
        for name in names:
            meta = c.list_topics(name, timeout=10).topics[name]
            out[name] = sum(c.get_watermark_offsets(TopicPartition(name, p), timeout=10)[1]
                            for p in meta.partitions)
        return out
    finally:
        c.close()


def test_short_demo_closes_the_loop(kafka_bootstrap, tmp_path):
    if not (shutil.which("chromium") or shutil.which("chromium-browser")):
        pytest.skip("Debian chromium is not installed (bash infra/run.sh installs it as root)")
    from infra.runtime.settings import load_settings
    from infra.runtime.topics import TOPICS, topic_name

    env = {**os.environ, "FLYWHEEL_DATA_DIR": str(tmp_path), "FLYWHEEL_KAFKA_BOOTSTRAP": kafka_bootstrap}
    run_id = f"e2e{uuid.uuid4().hex[:8]}"  # its own topics, even on a shared broker
    proc = subprocess.run(
        [sys.executable, "-m", "app.cli", "demo", "--minutes", "4", "--run-id", run_id, "--tasks", "quick",
         "--max-steps", "1", "--cold-start-demos", "4", "--value-pretrain-batches", "2",
         "--batch-episodes", "16", "--sandboxes", "2", "--episodes", "400", "--progress-s", "10",
         "--until-version", "3"],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=900,
    )
    print(proc.stdout[-4000:])
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = tmp_path / "reports" / run_id / "report.md"
    assert report.exists() and "Before and after" in report.read_text() and "## Phases" in report.read_text()
    text = report.read_text()
    assert "RL tasks fed by failure rate" in text, "the curriculum fed the RL tasks (app.curriculum)"
    assert "PPO's gain over the starting policy's episodes" in text, "the phase section states PPO's gain"
    summary = json.loads((report.parent / "summary.json").read_text())
    assert [p["phase"] for p in summary["phases"]] == ["cold start", "SFT", "value pretraining", "PPO"], summary
    # at most 2 critic-only batches; the stopping rule may end them after 1 (explained variance >= 0.5)
    assert 1 <= summary["value_pretraining"]["critic_only_batches"] <= 2, summary["value_pretraining"]
    assert summary["value_pretraining"]["value_return_corr_at_ppo_start"] is not None

    policy = f"pixel-{run_id}"
    counts = _sql(env, f"""SELECT
        (SELECT count() FROM steps FINAL WHERE policy = '{policy}') AS steps,
        (SELECT count() FROM trajectories FINAL WHERE policy = '{policy}') AS trajectories,
        (SELECT count() FROM scored FINAL WHERE policy = '{policy}') AS scored,
        (SELECT max(version) FROM policy_versions FINAL WHERE policy = '{policy}') AS published,
        (SELECT max(policy_version) FROM steps FINAL WHERE policy = '{policy}') AS acted,
        (SELECT count() FROM trainer_metrics FINAL WHERE policy = '{policy}') AS updates,
        (SELECT count() FROM dead_letters FINAL) AS dead,
        (SELECT count() FROM scored FINAL WHERE policy = 'scripted-{policy}') AS demos,
        (SELECT count() FROM policy_versions FINAL WHERE policy = '{policy}' AND version = 0
            AND mapContains(metrics, 'bc/train_match')) AS pi_sft,
        (SELECT count() FROM trainer_metrics FINAL WHERE policy = '{policy}'
            AND metrics['train/critic_only'] = 1 AND policy_version = 0) AS critic_only""")[0]
    print(counts)
    assert counts["steps"] > 0 and counts["trajectories"] > 0 and counts["scored"] > 0
    assert counts["published"] >= 1, "the trainer published no new policy version"
    assert counts["acted"] >= 1, "no rollout step was taken by a hot-reloaded version"
    assert counts["updates"] >= 1
    assert counts["dead"] == 0
    assert counts["demos"] == 8, "4 scripted demonstrations per task, each scored once"
    assert counts["pi_sft"] == 1, "version 0 is pi_sft, published by flywheel bc"
    # every critic-only update left pi_sft (v0) the acting version: none published a version
    assert counts["critic_only"] == summary["value_pretraining"]["critic_only_batches"]

    settings = load_settings({"kafka_bootstrap": kafka_bootstrap, "topic_prefix": f"demo-{run_id}."})
    marks = _high_watermarks(settings, [topic_name(t, settings) for t in TOPICS.all()])
    print(marks)
    for spec in (TOPICS.tasks, TOPICS.steps, TOPICS.trajectories, TOPICS.scored, TOPICS.rl,
                 TOPICS.policy, TOPICS.metrics):
        assert marks[topic_name(spec, settings)] > 0, f"nothing flowed through {spec.name}"
    assert marks[topic_name(TOPICS.sft, settings)] + marks[topic_name(TOPICS.ct, settings)] > 0
    assert marks[topic_name(TOPICS.dlq, settings)] == 0
    try:
        _run_from_pi_sft(env, run_id, tmp_path)
    finally:
        _delete_run_topics(settings)
        _delete_run_topics(load_settings({"kafka_bootstrap": kafka_bootstrap, "topic_prefix": f"demo-{run_id}b."}))


def _run_from_pi_sft(env: dict, source: str, data: Path) -> None:
    """A second run whose RL starts from the first run's pi_sft (`--start-from RUN@0`, as the
    merging benchmark's specialists do): no cold start, pi_sft copied unchanged as its first
    version and acted with, PPO's next version published, and the report says what taught it."""
    run_id = f"{source}b"
    proc = subprocess.run(
        [sys.executable, "-m", "app.cli", "demo", "--minutes", "3", "--run-id", run_id, "--tasks", "quick",
         "--max-steps", "1", "--start-from", f"{source}@0", "--value-pretrain-batches", "0",
         "--batch-episodes", "16", "--sandboxes", "2", "--episodes", "400", "--progress-s", "10",
         "--until-version", "1"],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=600,
    )
    print(proc.stdout[-3000:])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"starting from {source}@0: published as pixel-{run_id} v0" in proc.stdout
    report = (data / "reports" / run_id / "report.md").read_text()
    assert f"the version it started from, {source}@0 (taught by: scripted demonstrations (its run's cold start: pi_sft))" \
        in report, [line for line in report.splitlines() if "aught" in line]
    config = json.loads((data / "reports" / run_id / "config.json").read_text())
    assert config["taught_by"]["start_from"] == f"{source}@0"
    policy = f"pixel-{run_id}"
    row = _sql(env, f"""SELECT
        (SELECT count() FROM scored FINAL WHERE policy = 'scripted-{policy}') AS demos,
        (SELECT count() FROM steps FINAL WHERE policy = '{policy}') AS steps,
        (SELECT min(policy_version) FROM steps FINAL WHERE policy = '{policy}') AS first_acted,
        (SELECT max(version) FROM policy_versions FINAL WHERE policy = '{policy}') AS published,
        (SELECT count() FROM policy_versions FINAL WHERE policy = '{policy}' AND version = 0
            AND mapContains(metrics, 'start_from/{source}') AND metrics['start_from/{source}'] = 0) AS copies""")[0]
    print(row)
    assert row["demos"] == 0, "a run from a version has no cold start"
    assert row["steps"] > 0 and row["first_acted"] == 0, "its first episodes were played by the copied pi_sft"
    assert row["published"] >= 1, "PPO went on from the copy"
    assert row["copies"] == 1, "the copy's metrics name the run and version it came from"


def _delete_run_topics(settings) -> None:
    from confluent_kafka.admin import AdminClient

    from infra.runtime.kafka_clients import client_config

    admin = AdminClient(client_config(settings))
    names = [t for t in admin.list_topics(timeout=10).topics if t.startswith(settings.topic_prefix)]
    if names:
        for fut in admin.delete_topics(names, operation_timeout=30).values():
            try:
                fut.result()
            except Exception:  # noqa: BLE001 - clean-up only
                pass
