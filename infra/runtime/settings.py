"""Platform settings shared by every Flywheel process: Kafka, ClickHouse, blob store, data dir.

Resolved from arguments, then FLYWHEEL_* environment variables, then the defaults below
(see infra.runtime.config). A process that talks to the local broker and was given no security settings
also reads ``<data_dir>/kafka/sasl.env``, which `flywheel up --sasl` writes (and `down` removes),
so every `flywheel` command finds the local SASL_SSL broker's CA and credentials by itself.
Process-specific configs (rollout, streams, trainer, ...) live beside their process and embed
nothing of this; they take a ``Settings`` next to their own config.
"""

from __future__ import annotations

import logging
import os
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from infra.runtime.config import ConfigError, describe, env_name, opt, resolve

log = logging.getLogger("flywheel.settings")


@dataclass
class Settings:
    data_dir: str = opt("./var", "root folder for local state: Kafka jars and logs, chDB data, blobs, checkpoints")
    kafka_bootstrap: str = opt("", "Kafka bootstrap servers; empty means the local broker started by `flywheel up`")
    kafka_port: int = opt(19092, "first client port of the local broker(s) on 127.0.0.1")
    kafka_controller_port: int = opt(19093, "first controller port of the local KRaft quorum")
    kafka_security_protocol: str = opt(
        "PLAINTEXT", "Kafka security.protocol", choices=("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
    )
    kafka_sasl_mechanism: str = opt("", "SASL mechanism; empty means SCRAM-SHA-512 (librdkafka and Faust alike)")
    kafka_sasl_username: str = opt("", "SASL user name")
    kafka_sasl_password: str = opt("", "SASL password", secret=True)
    kafka_ssl_ca: str = opt("", "path of the CA certificate for TLS")
    kafka_ssl_cert: str = opt("", "path of the client certificate for TLS")
    kafka_ssl_key: str = opt("", "path of the client key for TLS", secret=True)
    topic_prefix: str = opt("", "prefix for every topic name (tests use a uuid prefix)")
    replication_factor: int = opt(1, "replication factor for created topics (3 on a three-broker cluster)")
    clickhouse_url: str = opt("", "ClickHouse server URL (http://host:8123); empty means embedded chDB under data_dir")
    clickhouse_user: str = opt("default", "ClickHouse user")
    clickhouse_password: str = opt("", "ClickHouse password", secret=True)
    clickhouse_database: str = opt("flywheel", "ClickHouse database")
    blob_url: str = opt("", "blob store URL (any fsspec URL); empty means <data_dir>/blobs")
    metrics_port: int = opt(0, "serve this process's Prometheus metrics on this port (/metrics); 0: off")
    metrics_host: str = opt("127.0.0.1", "address the metrics endpoint binds (0.0.0.0 inside a pod)")
    max_staleness: int = opt(4, "policy versions a trajectory may lag the newest and still be trained on: the router keeps staler ones out of flywheel.rl.v1 and the trainer drops them (one bound for both)")

    @property
    def data_path(self) -> Path:
        return Path(self.data_dir).resolve()

    @property
    def bootstrap(self) -> str:
        return self.kafka_bootstrap or f"127.0.0.1:{self.kafka_port}"

    @property
    def blob_root(self) -> str:
        return self.blob_url or str(self.data_path / "blobs")

    @property
    def checkpoint_root(self) -> Path:
        """Where trainers keep their checkpoints, one folder per policy (and mode)."""
        return self.data_path / "checkpoints"

    @property
    def chdb_path(self) -> Path:
        return self.data_path / "clickhouse"


def local_client_env_path(s: Settings) -> Path:
    """Where `flywheel up --sasl` leaves the client settings of the local SASL_SSL broker."""
    return s.data_path / "kafka" / "sasl.env"


def write_local_client_env(s: Settings, values: Mapping[str, str]) -> Path:
    """FLYWHEEL_* lines (shell-quoted, so `set -a; . FILE` works too), mode 0600: a password."""
    path = local_client_env_path(s)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write("".join(f"{env_name(k)}={shlex.quote(str(v))}\n" for k, v in values.items()))
    return path


def read_client_env(path: Path) -> dict[str, str]:
    env: dict[str, str] = {}
    for line in path.read_text().splitlines():
        words = shlex.split(line, comments=True)
        if words and "=" in words[0]:
            key, value = words[0].split("=", 1)
            env[key] = value
    return env


def _is_local(bootstrap: str) -> bool:
    return all(h.strip().rsplit(":", 1)[0] in ("127.0.0.1", "localhost") for h in bootstrap.split(","))


def _local_broker_env(s: Settings, args: Mapping, env: Mapping[str, str]) -> dict[str, str]:
    """The local SASL_SSL broker's client settings, when the process talks to the local broker
    and was given no security settings of its own (arguments and environment still win)."""
    chosen = args.get("kafka_security_protocol") is not None or env_name("kafka_security_protocol") in env
    path = local_client_env_path(s)
    if chosen or not _is_local(s.bootstrap) or not path.exists():
        return {}
    log.info("Kafka client settings of the local SASL_SSL broker from %s", path)
    return read_client_env(path)


def load_settings(args: dict | None = None, env: dict | None = None) -> Settings:
    args = dict(args or {})
    env = os.environ if env is None else env
    s = resolve(Settings, args, env)
    if local := _local_broker_env(s, args, env):
        s = resolve(Settings, args, {**local, **env})
    if s.max_staleness < 0:
        raise ConfigError(f"max_staleness={s.max_staleness}: must be >= 0")
    if s.replication_factor < 1:
        raise ConfigError(f"replication_factor={s.replication_factor}: must be >= 1")
    if s.clickhouse_url and not s.clickhouse_url.startswith(("http://", "https://")):
        raise ConfigError(
            f"clickhouse_url={s.clickhouse_url!r}: expected http(s)://host:port, or leave it empty for embedded chDB"
        )
    return s


def log_settings(s: Settings, logger: logging.Logger = log) -> None:
    logger.info("settings %s", describe(s))
