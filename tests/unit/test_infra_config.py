"""Settings and config resolution: arguments > FLYWHEEL_* env > defaults, clear errors, masked secrets."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import pytest

from infra.runtime.config import ConfigError, add_arguments, describe, opt, resolve
from infra.runtime.settings import Settings, load_settings


@dataclass
class Demo:
    workers: int = opt(2, "worker count")
    rate: float = opt(0.5, "rate")
    greedy: bool = opt(False, "greedy decoding")
    names: list[str] = opt(["a"], "names")
    mode: str = opt("fast", "mode", choices=("fast", "slow"))
    api_token: str = opt("", "token")


def test_defaults_apply_without_args_or_env():
    s = load_settings({}, env={})
    assert s.data_dir == "./var" and s.kafka_port == 19092 and s.bootstrap == "127.0.0.1:19092"


def test_env_overrides_defaults_and_args_override_env():
    env = {"FLYWHEEL_KAFKA_PORT": "29092", "FLYWHEEL_TOPIC_PREFIX": "env."}
    s = load_settings({}, env=env)
    assert s.kafka_port == 29092 and s.topic_prefix == "env."
    s = load_settings({"kafka_port": "39092", "topic_prefix": None}, env=env)
    assert s.kafka_port == 39092 and s.topic_prefix == "env."  # None means "not given"


def test_bootstrap_setting_wins_over_local_port():
    s = load_settings({"kafka_bootstrap": "k1:9092,k2:9092"}, env={"FLYWHEEL_KAFKA_PORT": "1"})
    assert s.bootstrap == "k1:9092,k2:9092"


def test_parsing_of_bool_float_and_list():
    cfg = resolve(Demo, {}, env={"FLYWHEEL_GREEDY": "yes", "FLYWHEEL_RATE": "0.25", "FLYWHEEL_NAMES": "x, y,"})
    assert cfg.greedy is True and cfg.rate == 0.25 and cfg.names == ["x", "y"]


@pytest.mark.parametrize(("env", "name"), [
    ({"FLYWHEEL_WORKERS": "many"}, "workers"),
    ({"FLYWHEEL_GREEDY": "perhaps"}, "greedy"),
    ({"FLYWHEEL_MODE": "medium"}, "mode"),
])
def test_bad_values_raise_config_error_naming_the_setting(env, name):
    with pytest.raises(ConfigError, match=name):
        resolve(Demo, {}, env=env)


def test_bad_settings_raise_config_error_naming_the_setting():
    with pytest.raises(ConfigError, match="kafka_port"):
        load_settings({}, env={"FLYWHEEL_KAFKA_PORT": "nine"})
    with pytest.raises(ConfigError, match="clickhouse_url"):
        load_settings({"clickhouse_url": "ftp://x"}, env={})
    with pytest.raises(ConfigError, match="replication_factor"):
        load_settings({"replication_factor": 0}, env={})
    with pytest.raises(ConfigError, match="kafka_security_protocol"):
        load_settings({"kafka_security_protocol": "TLS"}, env={})


def test_describe_masks_secrets_but_shows_the_rest():
    s = load_settings({"kafka_sasl_password": "hunter2", "kafka_ssl_key": "/k.pem",
                       "clickhouse_password": "pw", "kafka_sasl_username": "alice"}, env={})
    shown = describe(s)
    assert shown["kafka_sasl_password"] == "***" and shown["clickhouse_password"] == "***"
    assert shown["kafka_ssl_key"] == "***" and shown["kafka_sasl_username"] == "alice"
    assert "hunter2" not in repr(shown)
    assert describe(resolve(Demo, {"api_token": "t0k"}, env={}))["api_token"] == "***"
    assert describe(load_settings({}, env={}))["kafka_sasl_password"] == ""  # empty is not a secret


def test_add_arguments_round_trip_through_argparse():
    parser = argparse.ArgumentParser()
    add_arguments(parser, Settings)
    args = parser.parse_args(["--kafka-port", "12345", "--topic-prefix", "p."])
    s = load_settings(vars(args), env={"FLYWHEEL_KAFKA_PORT": "1", "FLYWHEEL_DATA_DIR": "/d"})
    assert s.kafka_port == 12345 and s.topic_prefix == "p." and s.data_dir == "/d"
