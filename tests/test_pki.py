"""The sandbox PKI: certificates chain to the CA and carry what the API server needs."""

from __future__ import annotations

import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from atoll.pki import write_pki


def _load(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def test_serving_certificate_is_for_loopback_and_signed_by_the_ca(tmp_path: Path) -> None:
    pki = write_pki(tmp_path / "pki")
    ca, serving = _load(pki.ca_cert), _load(pki.serving_cert)
    serving.verify_directly_issued_by(ca)
    sans = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert ipaddress.ip_address("127.0.0.1") in sans.get_values_for_type(x509.IPAddress)
    assert "localhost" in sans.get_values_for_type(x509.DNSName)
    usage = serving.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.SERVER_AUTH in usage


def test_admin_client_certificate_is_in_system_masters(tmp_path: Path) -> None:
    pki = write_pki(tmp_path / "pki")
    admin = _load(pki.admin_cert)
    admin.verify_directly_issued_by(_load(pki.ca_cert))
    orgs = admin.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)
    assert [o.value for o in orgs] == ["system:masters"]
    usage = admin.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.CLIENT_AUTH in usage


def test_private_keys_are_not_world_readable(tmp_path: Path) -> None:
    pki = write_pki(tmp_path / "pki")
    for key in (pki.ca_key, pki.serving_key, pki.admin_key, pki.sa_private):
        assert key.stat().st_mode & 0o077 == 0, key


def test_service_account_key_pair_matches(tmp_path: Path) -> None:
    pki = write_pki(tmp_path / "pki")
    private = serialization.load_pem_private_key(pki.sa_private.read_bytes(), password=None)
    public = serialization.load_pem_public_key(pki.sa_public.read_bytes())
    assert isinstance(private, ec.EllipticCurvePrivateKey)
    assert isinstance(public, ec.EllipticCurvePublicKey)
    assert private.public_key().public_numbers() == public.public_numbers()
