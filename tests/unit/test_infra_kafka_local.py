"""Pure parts of the local-Kafka code: broker properties, drift comparison, jar stamp, ids."""

from __future__ import annotations

from pathlib import Path

from infra.runtime.admin import compare, desired_config
from infra.kafka.broker import LocalCluster, new_cluster_id, server_properties
from infra.kafka.jars import POM, STAMP, jars_ready, pom_hash
from infra.runtime.settings import load_settings
from infra.runtime.topics import TOPICS


def props(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line)


def test_single_node_runs_internal_topics_with_replication_one():
    c = LocalCluster(Path("/h"), Path("/l"), 1, 19092, 19093)
    p = props(server_properties(c.nodes[0], c.nodes))
    assert p["controller.quorum.voters"] == "1@127.0.0.1:19093"
    assert p["offsets.topic.replication.factor"] == "1" and p["transaction.state.log.min.isr"] == "1"
    assert p["listeners"] == "PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093"


def test_three_nodes_have_a_three_voter_quorum_and_min_isr_two():
    c = LocalCluster(Path("/h"), Path("/l"), 3, 19092, 19093)
    assert c.bootstrap == "127.0.0.1:19092,127.0.0.1:19094,127.0.0.1:19096"
    ports = [p for n in c.nodes for p in (n.port, n.controller_port)]
    assert len(set(ports)) == 6
    p = props(server_properties(c.nodes[2], c.nodes))
    assert p["node.id"] == "3"
    assert p["controller.quorum.voters"] == "1@127.0.0.1:19093,2@127.0.0.1:19095,3@127.0.0.1:19097"
    assert p["default.replication.factor"] == "3" and p["min.insync.replicas"] == "2"
    assert p["transaction.state.log.min.isr"] == "2"


def test_drift_compare_reports_partitions_replication_and_each_config_key():
    s = load_settings({}, env={})
    spec = TOPICS.steps
    good = desired_config(spec, s)
    assert compare(spec, "x", spec.partitions, 1, good, s) == []
    bad = {**good, "retention.ms": "1", "cleanup.policy": "compact"}
    drift = compare(spec, "x", spec.partitions + 1, 2, bad, s)
    assert sorted(d.what for d in drift) == ["cleanup.policy", "partitions", "replication", "retention.ms"]
    assert all("x" in str(d) for d in drift)


def test_min_insync_follows_replication_factor():
    s3 = load_settings({"replication_factor": 3}, env={})
    assert desired_config(TOPICS.steps, s3)["min.insync.replicas"] == "2"
    assert desired_config(TOPICS.policy, s3)["cleanup.policy"] == "compact"


def test_jar_stamp_tracks_the_pom(tmp_path):
    assert not jars_ready(tmp_path)
    (tmp_path / STAMP).write_text(pom_hash(POM))
    assert jars_ready(tmp_path)
    (tmp_path / STAMP).write_text("stale")
    assert not jars_ready(tmp_path)


def test_cluster_ids_look_like_kafka_uuids():
    ids = {new_cluster_id() for _ in range(200)}
    assert len(ids) == 200 and all(len(i) == 22 and not i.startswith("-") for i in ids)


def test_missing_java_and_maven_give_one_clear_line(monkeypatch, tmp_path):
    import pytest

    from infra.runtime.errors import UserError
    from infra.kafka.jars import fetch_jars, java_executable

    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with pytest.raises(UserError, match="java not found.*JAVA_HOME"):
        java_executable()
    with pytest.raises(UserError, match="mvn not found"):
        fetch_jars(tmp_path / "libs")


def test_busy_port_is_refused_before_starting(tmp_path):
    import socket

    import pytest

    from infra.kafka.broker import free_port_block
    from infra.runtime.errors import UserError

    port = free_port_block(2)
    with socket.socket() as s:
        s.bind(("127.0.0.1", port + 1))
        s.listen()
        cluster = LocalCluster(tmp_path, tmp_path, 1, port, port + 1)
        with pytest.raises(UserError, match=f"port {port + 1} .*in use"):
            cluster._check_ports(cluster.nodes)


def test_unreachable_bootstrap_is_one_clear_line():
    import pytest

    from infra.runtime.errors import UserError
    from infra.runtime.probe import require_kafka

    with pytest.raises(UserError) as info:
        require_kafka(load_settings({"kafka_bootstrap": "127.0.0.1:1"}, env={}), timeout=1.0)
    msg = str(info.value)
    assert "\n" not in msg and "cannot reach Kafka at 127.0.0.1:1" in msg
    assert "flywheel up" in msg and "FLYWHEEL_KAFKA_BOOTSTRAP" in msg


def test_a_killed_brokers_errors_are_retried_and_others_are_not():
    from confluent_kafka import KafkaError

    from infra.runtime.kafka_clients import _transient

    # seen when a broker of three was SIGKILLed under the trainer's read of flywheel.policy.v1
    assert _transient(KafkaError(KafkaError._DESTROY_BROKER))
    assert _transient(KafkaError(KafkaError._TRANSPORT))
    assert _transient(KafkaError(KafkaError.NOT_LEADER_FOR_PARTITION))
    assert not _transient(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))
    assert not _transient(None)
