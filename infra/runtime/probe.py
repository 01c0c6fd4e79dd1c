"""Is Kafka there? Quiet metadata probes that turn "unreachable" into one clear line."""

from __future__ import annotations

from typing import Any

from infra.runtime.errors import UserError
from infra.runtime.settings import Settings


def _quiet(cfg: dict[str, Any]) -> dict[str, Any]:
    # librdkafka prints every refused connection to stderr; a probe expects refusals.
    return {**cfg, "log_level": 0, "socket.connection.setup.timeout.ms": 2000}


def probe_brokers(client_cfg: dict[str, Any], timeout: float = 2.0) -> dict[int, str] | None:
    """node id -> "host:port" of the brokers the cluster reports, or None if nobody answered."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    try:
        md = AdminClient(_quiet(client_cfg)).list_topics(timeout=timeout)
    except KafkaException:
        return None
    return {b.id: f"{b.host}:{b.port}" for b in md.brokers.values()}


def _reason(exc: BaseException) -> str:
    err = exc.args[0] if exc.args else None
    return err.str() if hasattr(err, "str") else str(exc)


def _is_auth_error(err) -> bool:
    from confluent_kafka import KafkaError

    return err.code() in (KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED) or "SASL" in err.str()


def _refused(settings: Settings, detail: str) -> UserError:
    # the user and where to fix it, never the password
    return UserError(f"Kafka at {settings.bootstrap} refused the credentials of user {settings.kafka_sasl_username!r} "
                     f"({settings.kafka_security_protocol}); check FLYWHEEL_KAFKA_SASL_USERNAME / "
                     f"FLYWHEEL_KAFKA_SASL_PASSWORD: {detail[:200]}")


def _metadata(settings: Settings, timeout: float):
    """(admin, metadata or None, first authentication error or None) within ``timeout``: a refused
    login is reported through the error callback, not by list_topics, so poll for both."""
    import time

    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    # local: loads confluent-kafka, needed only on this path
    from infra.runtime.kafka_clients import client_config

    auth_errors: list[str] = []
    admin = AdminClient({**_quiet(client_config(settings)),
                         "error_cb": lambda err: auth_errors.append(err.str()) if _is_auth_error(err) else None})
    deadline = time.monotonic() + timeout
    while True:
        try:
            return admin, admin.list_topics(timeout=min(0.5, max(0.05, deadline - time.monotonic()))), None
        except KafkaException as exc:
            admin.poll(0)  # serves the error callback
            if auth_errors:
                return admin, None, auth_errors[0]
            if time.monotonic() >= deadline:
                return admin, None, exc


def check_login(settings: Settings, timeout: float = 10.0) -> None:
    """SASL only: raise UserError (one line) if the broker refuses the credentials. librdkafka
    counts a refused login as retriable: a producer or consumer would log and retry forever."""
    if not settings.kafka_security_protocol.startswith("SASL"):
        return
    _, _, failure = _metadata(settings, timeout)
    if isinstance(failure, str):
        raise _refused(settings, failure)


def require_kafka(settings: Settings, timeout: float = 5.0):
    """An AdminClient on ``settings.bootstrap`` that has answered a metadata request.

    Raises UserError("cannot reach Kafka at X: ...") when nobody answers within ``timeout``, and
    UserError("Kafka at X refused the credentials ...") on a refused login.
    Returns ``(admin, metadata)``.
    """
    admin, md, failure = _metadata(settings, timeout)
    if isinstance(failure, str):
        raise _refused(settings, failure)
    if md is None:
        raise UserError(
            f"cannot reach Kafka at {settings.bootstrap}: {_reason(failure)}; "
            "start one with `flywheel up` or set FLYWHEEL_KAFKA_BOOTSTRAP"
        ) from None
    return admin, md
