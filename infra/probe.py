"""Is Kafka there? Quiet metadata probes that turn "unreachable" into one clear line."""

from __future__ import annotations

from typing import Any

from infra.errors import UserError
from infra.settings import Settings


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


def require_kafka(settings: Settings, timeout: float = 5.0):
    """An AdminClient on ``settings.bootstrap`` that has answered a metadata request.

    Raises UserError("cannot reach Kafka at X: ...") when nobody answers within ``timeout``.
    Returns ``(admin, metadata)``.
    """
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient

    from infra.kafka import client_config

    auth_errors: list[str] = []

    def on_error(err) -> None:  # librdkafka reports a refused login here, not in list_topics
        if err.code() in (KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED) or "SASL" in err.str():
            auth_errors.append(err.str())

    admin = AdminClient({**_quiet(client_config(settings)), "error_cb": on_error})
    try:
        md = admin.list_topics(timeout=timeout)
    except KafkaException as exc:
        admin.poll(0.5)  # error callbacks are served by poll
        if auth_errors:
            raise UserError(
                f"Kafka at {settings.bootstrap} refused the credentials of user {settings.kafka_sasl_username!r} "
                f"({settings.kafka_security_protocol}); check FLYWHEEL_KAFKA_SASL_USERNAME / "
                f"FLYWHEEL_KAFKA_SASL_PASSWORD: {auth_errors[0][:200]}") from None
        raise UserError(
            f"cannot reach Kafka at {settings.bootstrap}: {_reason(exc)}; "
            "start one with `flywheel up` or set FLYWHEEL_KAFKA_BOOTSTRAP"
        ) from None
    return admin, md
