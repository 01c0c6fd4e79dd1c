"""The demo shell: children get every setting, report buckets fit the run, exit says what is left."""

from __future__ import annotations

import dataclasses

from app.demo_children import child_env
from infra.runtime.config import resolve
from infra.runtime.settings import Settings, load_settings


def test_children_rebuild_the_same_settings_with_the_run_prefix(tmp_path):
    given = load_settings({"data_dir": str(tmp_path), "kafka_bootstrap": "127.0.0.1:1",
                           "kafka_security_protocol": "SASL_SSL", "kafka_sasl_mechanism": "SCRAM-SHA-512",
                           "kafka_sasl_username": "alice", "kafka_sasl_password": "s3cret",
                           "kafka_ssl_ca": str(tmp_path / "ca.pem"), "clickhouse_url": "http://127.0.0.1:8123",
                           "clickhouse_user": "bob", "clickhouse_password": "hunter2", "replication_factor": 3},
                          env={})
    child = resolve(Settings, env=child_env(given, "demo-x."))
    assert child.topic_prefix == "demo-x."
    for f in dataclasses.fields(Settings):
        if f.name not in ("topic_prefix", "data_dir"):
            assert getattr(child, f.name) == getattr(given, f.name), f.name
    assert child.data_path == given.data_path


def test_report_buckets_are_sized_to_the_run():
    from app.report import bucket_seconds

    assert 60 / bucket_seconds(60) >= 20  # a 1-minute run shows a curve, not 2 points
    assert bucket_seconds(15 * 60) == 30
    assert 2 <= bucket_seconds(1) and bucket_seconds(10 * 3600) <= 600


def test_at_exit_the_demo_says_what_it_leaves_running(tmp_path):
    from app.demo_platform import leave_platform

    class Started:
        bootstrap, stopped, nodes = "127.0.0.1:1", False, [1]

        def stop(self):  # -> the node ids it stopped, as LocalCluster.stop
            self.stopped = True
            return self.nodes

    settings = load_settings({"data_dir": str(tmp_path)}, env={})
    assert "left running" in leave_platform(settings, None, keep=False)
    kept = Started()
    assert "left running" in leave_platform(settings, kept, keep=True) and not kept.stopped
    ours = Started()
    assert "stopped" in leave_platform(settings, ours, keep=False) and ours.stopped
    never_up = Started()  # the run ended before its broker came up
    never_up.nodes = []
    assert "not running" in leave_platform(settings, never_up, keep=False) and never_up.stopped
