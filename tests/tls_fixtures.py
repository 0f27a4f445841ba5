"""Certificates for the agent's TLS tests, made with `cryptography`: a CA, the agent's certificate
(127.0.0.1 and localhost), a client certificate the CA signed, and one from a CA nobody trusts."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    rogue_cert: Path  # signed by a CA the agent does not trust
    rogue_key: Path
    other_client_cert: Path  # signed by the trusted CA, under another name (client_allowed_sans)
    other_client_key: Path


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _write(path: Path, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey | None = None,
           key_path: Path | None = None) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    if key is not None and key_path is not None:
        key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))
        key_path.chmod(0o600)


def _ca(common: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _key()
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(_name(common)).issuer_name(_name(common))
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                         crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    return cert, key


def _leaf(ca: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey, common: str, sans: list[x509.GeneralName],
          usage: x509.ObjectIdentifier) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _key()
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(_name(common)).issuer_name(ca.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    return cert, key


def make_pki(directory: Path) -> Pki:
    import ipaddress

    directory.mkdir(parents=True, exist_ok=True)
    ca, ca_key = _ca("specwatch test CA")
    rogue_ca, rogue_ca_key = _ca("a CA nobody trusts")
    server, server_key = _leaf(ca, ca_key, "specwatch agent",
                               [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))],
                               ExtendedKeyUsageOID.SERVER_AUTH)
    client, client_key = _leaf(ca, ca_key, "prometheus", [x509.DNSName("prometheus.monitoring.svc")],
                               ExtendedKeyUsageOID.CLIENT_AUTH)
    other, other_key = _leaf(ca, ca_key, "someone else", [x509.DNSName("grafana.monitoring.svc")],
                             ExtendedKeyUsageOID.CLIENT_AUTH)
    rogue, rogue_key = _leaf(rogue_ca, rogue_ca_key, "prometheus", [x509.DNSName("prometheus.monitoring.svc")],
                             ExtendedKeyUsageOID.CLIENT_AUTH)
    pki = Pki(ca=directory / "ca.crt", server_cert=directory / "agent.crt", server_key=directory / "agent.key",
              client_cert=directory / "client.crt", client_key=directory / "client.key",
              rogue_cert=directory / "rogue.crt", rogue_key=directory / "rogue.key",
              other_client_cert=directory / "other.crt", other_client_key=directory / "other.key")
    _write(pki.ca, ca)
    _write(pki.server_cert, server, server_key, pki.server_key)
    _write(pki.client_cert, client, client_key, pki.client_key)
    _write(pki.rogue_cert, rogue, rogue_key, pki.rogue_key)
    _write(pki.other_client_cert, other, other_key, pki.other_client_key)
    return pki
