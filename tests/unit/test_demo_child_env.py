"""Demo children get every platform setting, credentials given as options included."""

from __future__ import annotations

import dataclasses

from infra.app.demo import child_env
from infra.config import resolve
from infra.settings import Settings, load_settings


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
