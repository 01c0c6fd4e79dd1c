"""Fixtures of the integration tests that run the Faust worker (tests/integration/streams_support.py)."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import AdminClient

from infra.runtime.admin import delete_topics
from infra.runtime.kafka_clients import client_config


@pytest.fixture
def delete_faust_internal_topics(settings):
    """Faust creates its changelog/assignor topics under the app id (the test's prefix); they go
    after the test, with the catalog topics ``settings`` deletes."""
    yield
    topics = AdminClient(client_config(settings)).list_topics(timeout=10).topics
    internal = [t for t in topics if t.startswith(settings.topic_prefix + "flywheel-streams")]
    if internal:
        delete_topics(settings, internal)
