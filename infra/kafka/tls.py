"""TLS material and SCRAM credentials for a local broker that speaks SASL_SSL.

``make_security(folder)`` writes, once, into ``folder`` (mode 0700): a self-signed CA
(``ca.pem``), the broker's key and certificate signed by it for 127.0.0.1 and localhost
(``broker.pem``: PKCS#8 key then certificate, the layout Kafka's PEM keystore reads), and random
passwords for the broker's own SCRAM user and for the client user (``credentials.json``, mode
0600). A second call reuses what is there, so clients keep working across broker restarts.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

MECHANISM = "SCRAM-SHA-512"  # the one default for librdkafka, Faust and the broker


@dataclass(frozen=True)
class Security:
    folder: Path
    user: str
    password: str
    broker_user: str
    broker_password: str

    @property
    def ca(self) -> Path:
        return self.folder / "ca.pem"

    @property
    def keystore(self) -> Path:
        return self.folder / "broker.pem"

    def client_settings(self) -> dict[str, str]:
        """The Settings fields a client needs (also as FLYWHEEL_* variables)."""
        return {"kafka_security_protocol": "SASL_SSL", "kafka_sasl_mechanism": MECHANISM,
                "kafka_sasl_username": self.user, "kafka_sasl_password": self.password,
                "kafka_ssl_ca": str(self.ca)}


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _certificates(folder: Path) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Flywheel local CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + datetime.timedelta(days=3650))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    san = x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=825))
            .add_extension(san, critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    (folder / "ca.pem").write_bytes(ca.public_bytes(pem))
    _write_private(folder / "broker.pem", key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                                            serialization.NoEncryption()) + cert.public_bytes(pem))


def make_security(folder: Path, user: str = "flywheel") -> Security:
    """Create (once) or load the CA, the broker certificate and the SCRAM credentials."""
    folder.mkdir(parents=True, exist_ok=True)
    os.chmod(folder, 0o700)
    creds_path = folder / "credentials.json"
    if not creds_path.exists() or not (folder / "broker.pem").exists():
        _certificates(folder)
        creds = {"user": user, "password": secrets.token_urlsafe(18),
                 "broker_user": "broker", "broker_password": secrets.token_urlsafe(18)}
        _write_private(creds_path, json.dumps(creds).encode())
    creds = json.loads(creds_path.read_text())
    return Security(folder, creds["user"], creds["password"], creds["broker_user"], creds["broker_password"])
