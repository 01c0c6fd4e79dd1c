"""Shared fixtures. Integration tests talk to a real Kafka broker, never a stand-in:

- ``kafka_bootstrap`` (session): FLYWHEEL_KAFKA_BOOTSTRAP when set (it must answer); else the
  local broker from `flywheel up` if it answers on the configured port; else a broker started
  here in a temporary folder on free ports and stopped at the end of the session.
- ``settings`` (function): a ``Settings`` with data_dir=tmp_path, that bootstrap and a fresh
  ``t<uuid8>.`` topic prefix; every catalog topic exists before the test starts and is deleted
  after it.
- ``group_id`` (function): a fresh consumer group id.
- ``kafka_libs`` (session): the fetched broker jars, for tests that run a dedicated cluster
  (``infra.kafka.broker.LocalCluster``) because they stop or kill brokers.

Kafka-related imports happen inside the fixtures so unit tests never need a broker.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TIERS = {"integration": pytest.mark.integration, "e2e": pytest.mark.e2e}


def pytest_collection_modifyitems(config, items):
    for item in items:
        parts = Path(str(item.fspath)).parts
        for tier, mark in TIERS.items():
            if "tests" in parts and tier in parts:
                item.add_marker(mark)


def _base_settings():
    from infra.runtime.settings import load_settings

    # data_dir relative to the checkout, not the cwd, so the cached jars are found.
    args = {} if os.environ.get("FLYWHEEL_DATA_DIR") else {"data_dir": str(ROOT / "var")}
    return load_settings(args)


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory):
    from infra.kafka.broker import LocalCluster, free_port_block
    from infra.runtime.errors import UserError
    from infra.runtime.kafka_clients import client_config
    from infra.kafka.jars import fetch_jars
    from infra.runtime.probe import probe_brokers

    base = _base_settings()
    if os.environ.get("FLYWHEEL_KAFKA_BOOTSTRAP"):
        if probe_brokers(client_config(base), timeout=10.0) is None:
            pytest.fail(f"FLYWHEEL_KAFKA_BOOTSTRAP={base.bootstrap} does not answer", pytrace=False)
        yield base.bootstrap
        return
    if probe_brokers(client_config(base), timeout=2.0):
        yield base.bootstrap  # the shared broker from `flywheel up`
        return
    libs = base.data_path / "kafka" / "libs"
    port = free_port_block(2)
    cluster = LocalCluster(tmp_path_factory.mktemp("kafka"), libs, 1, port, port + 1)
    try:
        fetch_jars(libs)
        cluster.start()
    except UserError as exc:
        cluster.stop(grace=5)
        pytest.fail(f"could not start a Kafka broker for the tests: {exc}", pytrace=False)
    try:
        yield cluster.bootstrap
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def kafka_libs():
    """The broker jars (fetched once), for tests that run their own dedicated cluster."""
    from infra.runtime.errors import UserError
    from infra.kafka.jars import fetch_jars

    libs = _base_settings().data_path / "kafka" / "libs"
    try:
        fetch_jars(libs)
    except UserError as exc:
        pytest.fail(f"cannot fetch the Kafka jars: {exc}", pytrace=False)
    return libs


@pytest.fixture
def settings(kafka_bootstrap, tmp_path):
    from infra.runtime.admin import delete_topics, ensure_topics
    from infra.runtime.settings import load_settings

    s = load_settings({"data_dir": str(tmp_path), "kafka_bootstrap": kafka_bootstrap,
                       "topic_prefix": f"t{uuid.uuid4().hex[:8]}."})
    report = ensure_topics(s)
    assert not report.drift, report.lines()
    yield s
    try:
        delete_topics(s, report.created)
    except Exception:  # clean-up only: a test that stopped the broker must not error here
        pass


@pytest.fixture
def group_id() -> str:
    return f"g{uuid.uuid4().hex[:12]}"
