"""The demo report's CPU table counts the Kafka broker it runs against when that broker is a
process of this machine: the process listening on the bootstrap's port (the real broker here)."""

from __future__ import annotations

import dataclasses
import socket

import psutil

from app.demo_platform import broker_processes
from infra.runtime.cpu_share import CpuShare


def test_the_local_broker_is_found_by_its_port_and_its_cpu_is_counted(settings):
    found = broker_processes(settings)
    assert list(found) == ["kafka"], found
    assert "kafka" in " ".join(psutil.Process(found["kafka"]).cmdline()).lower()
    share = CpuShare()
    share.sample(found)
    share.sample(found)
    assert [name for name, _, _ in share.rows()] == ["kafka"]


def test_a_broker_elsewhere_or_a_port_no_one_serves_counts_nothing(settings):
    with socket.socket() as s:  # a port free on this machine (closed again before the lookup)
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    assert broker_processes(dataclasses.replace(settings, kafka_bootstrap=f"127.0.0.1:{free}")) == {}
    port = settings.bootstrap.rsplit(":", 1)[1]
    assert broker_processes(dataclasses.replace(settings, kafka_bootstrap=f"kafka.example:{port}")) == {}
