"""SASL/SCRAM and TLS pieces without a broker: the project-made CA and certificate, the listener
properties, one SASL mechanism default for librdkafka and Faust, and the local client settings
that `flywheel up --sasl` leaves for other flywheel commands."""

from __future__ import annotations

import ipaddress
import ssl
from pathlib import Path

from cryptography import x509

from infra.kafka.broker import LocalCluster, Node, listener_properties, server_properties
from infra.runtime.kafka_clients import client_config, faust_credentials
from infra.runtime.settings import load_settings, local_client_env_path, read_client_env, write_local_client_env
from infra.kafka.tls import MECHANISM, make_security


def test_the_broker_certificate_is_signed_by_the_ca_for_the_loopback_address(tmp_path):
    sec = make_security(tmp_path / "sec")
    ca = x509.load_pem_x509_certificate(sec.ca.read_bytes())
    pem = sec.keystore.read_bytes()
    assert pem.startswith(b"-----BEGIN PRIVATE KEY-----")  # PKCS#8 first: Kafka's PEM keystore layout
    cert = x509.load_pem_x509_certificate(pem[pem.index(b"-----BEGIN CERTIFICATE-----"):])
    cert.verify_directly_issued_by(ca)
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert ipaddress.ip_address("127.0.0.1") in san.get_values_for_type(x509.IPAddress)
    assert "localhost" in san.get_values_for_type(x509.DNSName)
    # the same chain verifies with the TLS stack the Faust client uses
    ctx = ssl.create_default_context(cafile=str(sec.ca))
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.get_ca_certs()


def test_secrets_are_private_and_reused_across_calls(tmp_path):
    first = make_security(tmp_path / "sec")
    for name in ("broker.pem", "credentials.json"):
        assert ((tmp_path / "sec" / name).stat().st_mode & 0o777) == 0o600
    assert ((tmp_path / "sec").stat().st_mode & 0o777) == 0o700
    again = make_security(tmp_path / "sec")
    assert again == first and first.password != first.broker_password and len(first.password) >= 20


def test_listeners_plaintext_by_default_sasl_ssl_with_a_plaintext_controller(tmp_path):
    node = Node(1, 30000, 30001, tmp_path / "n1")
    plain = server_properties(node, [node])
    assert "listeners=PLAINTEXT://127.0.0.1:30000,CONTROLLER://127.0.0.1:30001" in plain
    assert "sasl" not in plain and "ssl." not in plain
    sec = make_security(tmp_path / "sec")
    props = listener_properties(node, sec)
    assert props["listeners"] == "SASL_SSL://127.0.0.1:30000,CONTROLLER://127.0.0.1:30001"
    assert props["listener.security.protocol.map"] == "SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT"
    assert props["sasl.enabled.mechanisms"] == props["sasl.mechanism.inter.broker.protocol"] == MECHANISM
    assert props["ssl.keystore.type"] == "PEM" and props["ssl.truststore.location"] == sec.ca
    assert f'username="{sec.broker_user}"' in props["listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config"]


def test_one_sasl_mechanism_default_for_librdkafka_and_faust(tmp_path):
    sec = make_security(tmp_path / "sec")
    s = load_settings({**sec.client_settings(), "kafka_sasl_mechanism": None}, env={})
    assert s.kafka_sasl_mechanism == ""  # nothing chosen: the default applies to both clients
    cfg = client_config(s)
    assert cfg["sasl.mechanism"] == MECHANISM == "SCRAM-SHA-512"  # librdkafka alone would pick GSSAPI
    assert cfg["ssl.ca.location"] == str(sec.ca) and cfg["sasl.username"] == sec.user
    creds = faust_credentials(s)
    assert creds.mechanism.value == MECHANISM  # Faust alone would pick PLAIN
    assert creds.username == sec.user and creds.ssl_context.get_ca_certs()
    plain = load_settings({}, env={})
    assert faust_credentials(plain) is None and not any(k.startswith(("sasl", "ssl")) for k in client_config(plain))
    cluster = LocalCluster(tmp_path / "k", tmp_path / "libs", 1, 30000, 30001, sec)
    assert cluster.client_config()["sasl.mechanism"] == MECHANISM


def test_flywheel_commands_pick_up_the_local_sasl_broker_settings(tmp_path):
    data = tmp_path / "data dir"  # a space: the file stays readable by `. sasl.env` and by us
    (data / "kafka").mkdir(parents=True)
    sec = make_security(data / "kafka" / "security")
    base = load_settings({"data_dir": str(data)}, env={})
    path = write_local_client_env(base, sec.client_settings())
    assert path == local_client_env_path(base) and (path.stat().st_mode & 0o777) == 0o600
    assert read_client_env(path)["FLYWHEEL_KAFKA_SSL_CA"] == str(sec.ca)

    s = load_settings({"data_dir": str(data)}, env={})
    assert (s.kafka_security_protocol, s.kafka_sasl_username, s.kafka_sasl_password, s.kafka_ssl_ca) == (
        "SASL_SSL", sec.user, sec.password, str(sec.ca))
    # a process given its own security settings, or talking to another cluster, keeps its own
    chosen = load_settings({"data_dir": str(data)}, env={"FLYWHEEL_KAFKA_SECURITY_PROTOCOL": "PLAINTEXT"})
    remote = load_settings({"data_dir": str(data), "kafka_bootstrap": "kafka.internal:9092"}, env={})
    assert chosen.kafka_security_protocol == remote.kafka_security_protocol == "PLAINTEXT"
    # arguments still win over the file
    other = load_settings({"data_dir": str(data), "kafka_sasl_username": "alice"}, env={})
    assert other.kafka_sasl_username == "alice" and other.kafka_security_protocol == "SASL_SSL"
    Path(path).unlink()
    assert load_settings({"data_dir": str(data)}, env={}).kafka_security_protocol == "PLAINTEXT"
