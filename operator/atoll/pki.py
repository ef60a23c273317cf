"""PKI made with `cryptography`: a CA, serving certificates (the sandbox API server, the
admission webhook), an admin client certificate, and the service-account key pair."""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALIDITY = dt.timedelta(days=30)


@dataclass(frozen=True, slots=True)
class Pki:
    """Paths of the PEM files written by `write_pki`."""

    ca_cert: Path
    ca_key: Path
    serving_cert: Path
    serving_key: Path
    admin_cert: Path
    admin_key: Path
    sa_public: Path
    sa_private: Path


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _name(common_name: str, org: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if org:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _builder(subject: x509.Name, issuer: x509.Name, public: ec.EllipticCurvePublicKey) -> Any:
    now = dt.datetime.now(dt.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
    )


def make_ca(common_name: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """A self-signed CA certificate and its key."""
    key = _key()
    name = _name(common_name)
    cert = (
        _builder(name, name, key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    return cert, key


def issue(
    ca: tuple[x509.Certificate, ec.EllipticCurvePrivateKey],
    common_name: str,
    *,
    org: str | None = None,
    dns: tuple[str, ...] = (),
    ips: tuple[str, ...] = (),
    server: bool = False,
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """A leaf certificate signed by `ca`: a server certificate with SANs, or a client one."""
    ca_cert, ca_key = ca
    key = _key()
    usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
    builder = (
        _builder(_name(common_name, org), ca_cert.subject, key.public_key())
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    )
    sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
    sans += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(ca_key, hashes.SHA256()), key


def cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return _key_pem(key)


def write_pki(directory: Path) -> Pki:
    """Generate the whole PKI into `directory` (mode 0700) and return the file paths."""
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o700)
    ca = make_ca("atoll-sandbox-ca")
    serving = issue(
        ca,
        "kube-apiserver",
        dns=("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"),
        ips=("127.0.0.1",),
        server=True,
    )
    admin = issue(ca, "atoll-admin", org="system:masters")
    sa_key = _key()
    files = {
        "ca.crt": cert_pem(ca[0]),
        "ca.key": _key_pem(ca[1]),
        "apiserver.crt": cert_pem(serving[0]),
        "apiserver.key": _key_pem(serving[1]),
        "admin.crt": cert_pem(admin[0]),
        "admin.key": _key_pem(admin[1]),
        "sa.key": _key_pem(sa_key),
        "sa.pub": sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        ),
    }
    for name, data in files.items():
        path = directory / name
        path.write_bytes(data)
        path.chmod(0o600)
    return Pki(
        ca_cert=directory / "ca.crt",
        ca_key=directory / "ca.key",
        serving_cert=directory / "apiserver.crt",
        serving_key=directory / "apiserver.key",
        admin_cert=directory / "admin.crt",
        admin_key=directory / "admin.key",
        sa_public=directory / "sa.pub",
        sa_private=directory / "sa.key",
    )


@dataclass(frozen=True, slots=True)
class ServingPki:
    """Paths of a CA and one serving certificate signed by it."""

    ca_cert: Path
    serving_cert: Path
    serving_key: Path


def serving_pems(
    dns: tuple[str, ...] = (), ips: tuple[str, ...] = ()
) -> tuple[bytes, bytes, bytes]:
    """A fresh CA and a serving certificate for the given names (an admission webhook's; the
    first name is its subject), as PEM: (CA certificate, certificate, key)."""
    ca = make_ca("atoll-webhook-ca")
    cert, key = issue(ca, (dns or ips or ("atoll-webhook",))[0], dns=dns, ips=ips, server=True)
    return cert_pem(ca[0]), cert_pem(cert), key_pem(key)


def write_serving_pki(
    directory: Path, *, dns: tuple[str, ...] = (), ips: tuple[str, ...] = ()
) -> ServingPki:
    """`serving_pems` written to `directory` (ca.crt, tls.crt, tls.key)."""
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o700)
    ca, cert, key = serving_pems(dns, ips)
    out = ServingPki(
        ca_cert=directory / "ca.crt",
        serving_cert=directory / "tls.crt",
        serving_key=directory / "tls.key",
    )
    out.ca_cert.write_bytes(ca)
    out.serving_cert.write_bytes(cert)
    out.serving_key.write_bytes(key)
    out.serving_key.chmod(0o600)
    return out


if __name__ == "__main__":
    # `python -m atoll.pki '{"dns": [...], "ips": [...]}'`: `serving_pems` as a JSON list of
    # PEM strings on stdout (how the operator makes its webhook certificate without loading
    # `cryptography` itself: atoll.kube.webhook.serving_certificate).
    import json
    import sys

    names = json.loads(sys.argv[1])
    pems = serving_pems(tuple(names["dns"]), tuple(names["ips"]))
    print(json.dumps([p.decode() for p in pems]))
