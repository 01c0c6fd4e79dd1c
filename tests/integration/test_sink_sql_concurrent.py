"""`flywheel sql` while `flywheel sink` owns the embedded chDB directory (two processes)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from tests.fakes.run import publish, synthetic_run
from infra.clickhouse.endpoint import endpoint_file


def env_for(settings):
    env = dict(os.environ)
    env.update(FLYWHEEL_DATA_DIR=str(settings.data_dir), FLYWHEEL_KAFKA_BOOTSTRAP=settings.bootstrap,
               FLYWHEEL_TOPIC_PREFIX=settings.topic_prefix)
    return env


def flywheel_sql(settings, statement, fmt="json"):
    out = subprocess.run([sys.executable, "-m", "app.cli", "sql", statement, "--format", fmt],
                         env=env_for(settings), capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_sql_while_sink_runs(settings, group_id, tmp_path):
    log = open(tmp_path / "sink.log", "w")
    sink = subprocess.Popen([sys.executable, "-m", "app.cli", "sink", "--group-id", group_id, "--query-port", "0",
                             "--flush-interval-s", "0.5"], env=env_for(settings), stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while not endpoint_file(settings).exists():
            assert sink.poll() is None, (tmp_path / "sink.log").read_text()
            assert time.monotonic() < deadline, "the sink never served its query endpoint"
            time.sleep(0.2)
        run = synthetic_run(10, seed=9)
        publish(settings, run)
        expected = len(run.scored)
        counted = None
        while time.monotonic() < deadline:
            counted = json.loads(flywheel_sql(settings, "SELECT count() AS n FROM scored FINAL"))[0]["n"]
            if counted == expected:
                break
            time.sleep(0.5)
        assert counted == expected
        table = flywheel_sql(settings, "SELECT task_name, sum(episodes) AS episodes FROM v_success_by_policy "
                                       "GROUP BY task_name ORDER BY task_name", fmt="table")
        assert table.splitlines()[0].split() == ["task_name", "episodes"]
        assert table.rstrip().endswith("rows)")
        refused = subprocess.run([sys.executable, "-m", "app.cli", "sql", "DROP TABLE scored"],
                                 env=env_for(settings), capture_output=True, text=True, timeout=60)
        assert refused.returncode == 2 and "readonly" in refused.stderr.lower()
    finally:
        sink.send_signal(signal.SIGTERM)
        rc = sink.wait(timeout=60)
        log.close()
    assert rc == 0, (tmp_path / "sink.log").read_text()
    assert "stopped:" in (tmp_path / "sink.log").read_text()
    assert not endpoint_file(settings).exists()
    # the owner is gone: `flywheel sql` now opens chDB itself and sees the same rows
    assert json.loads(flywheel_sql(settings, "SELECT count() AS n FROM scored FINAL"))[0]["n"] == expected
    csv_out = flywheel_sql(settings, "SELECT 1 AS a, 'x,y' AS b", fmt="csv")
    assert csv_out.splitlines() == ["a,b", '1,"x,y"']
