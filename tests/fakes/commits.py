"""A consumer whose commits fail first: the commit retries' tests (sinks, rollout workers)."""

from __future__ import annotations

from confluent_kafka import KafkaError, KafkaException, TopicPartition


class FlakyCommits:
    """A consumer whose first commits fail with ``errors`` (KafkaError codes), then succeed."""

    def __init__(self, *errors: int) -> None:
        self.errors = list(errors)
        self.committed: list[list[TopicPartition]] = []

    def commit(self, offsets, asynchronous):
        assert asynchronous is False
        if self.errors:
            raise KafkaException(KafkaError(self.errors.pop(0)))
        self.committed.append(offsets)
