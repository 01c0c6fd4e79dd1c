"""Regenerate the example outputs of docs/analytics.md from a real run.

    python docs/analytics_examples.py > /tmp/examples.md

Starts `flywheel sink` in a subprocess on a temporary data dir and fresh uuid-prefixed topics of
the local broker, publishes a synthetic run (plus one malformed record), and prints each
example query with what `flywheel sql` answered while the sink was running.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/fakes: test support, not installed
from tests.fakes.run import publish, synthetic_run  # noqa: E402
from infra.runtime.admin import delete_topics, ensure_topics
from infra.clickhouse.endpoint import endpoint_file
from infra.runtime.kafka_clients import make_producer
from infra.runtime.settings import load_settings
from infra.runtime.topics import TOPICS, topic_name

QUERIES = [
    "SELECT policy_version, task_name, episodes, success_rate, mean_reward FROM v_success_by_policy",
    "SELECT minute, episodes, mean_reward, success_rate FROM v_reward_over_time",
    "SELECT task_name, status, episodes, mean_steps, p50_steps, p90_steps, max_steps FROM v_steps_per_episode",
    "SELECT policy_version, steps, mean_thought_chars, mean_thought_words, p90_thought_words FROM v_thought_length",
    "SELECT policy_version, action, steps, share FROM v_action_types WHERE policy_version = 2",
    "SELECT * FROM v_staleness_histogram",
    "SELECT stage, error_type, letters FROM v_dead_letters_by_stage",
    "SELECT name, update, value FROM v_trainer_metrics WHERE name = 'losses/pg_loss'",
    "SELECT step_index, round(avg(thought_words), 1) AS mean_words, count() AS steps FROM steps FINAL "
    "GROUP BY step_index ORDER BY step_index",
    "SELECT count() AS inserted, (SELECT count() FROM steps FINAL) AS distinct_steps FROM steps",
]


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        settings = load_settings({"data_dir": tmp, "topic_prefix": f"docs{uuid.uuid4().hex[:8]}."})
        report = ensure_topics(settings)
        env = dict(os.environ, FLYWHEEL_DATA_DIR=tmp, FLYWHEEL_KAFKA_BOOTSTRAP=settings.bootstrap,
                   FLYWHEEL_TOPIC_PREFIX=settings.topic_prefix)
        sink = subprocess.Popen([sys.executable, "-m", "app.cli", "sink", "--query-port", "0"], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            while not endpoint_file(settings).exists():
                time.sleep(0.2)
            run = synthetic_run(40, seed=1)
            publish(settings, run, copies=2)  # everything twice: the tables must still count once
            producer = make_producer(settings)
            producer.produce(topic_name(TOPICS.steps, settings), key=b"ep-x", value=b"{oops")
            producer.flush(10)
            time.sleep(8)
            for sql in QUERIES:
                out = subprocess.run([sys.executable, "-m", "app.cli", "sql", sql], env=env,
                                     capture_output=True, text=True, timeout=60)
                print(f"```\n$ flywheel sql \"{sql}\"\n{out.stdout.rstrip() or out.stderr.rstrip()}\n```\n")
        finally:
            sink.send_signal(signal.SIGTERM)
            sink.wait(60)
            delete_topics(settings, report.created)


if __name__ == "__main__":
    main()
