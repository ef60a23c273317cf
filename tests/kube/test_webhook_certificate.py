"""The webhook's certificate is made in a child process (`webhook.serving_certificate`): it
chains to its CA, names what it serves, its key is its own, and the operator process never
loads `cryptography` (about 8 MiB resident for its life)."""

from __future__ import annotations

import ipaddress
import subprocess
import sys

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import ExtendedKeyUsageOID

from atoll.kube.webhook import serving_certificate
from tests.conftest import REPO


def test_the_certificate_chains_to_its_ca_and_names_the_service() -> None:
    names = ("atoll-webhook.atoll-system.svc", "atoll-webhook.atoll-system.svc.cluster.local")
    ca_pem, cert_pem, key_pem = serving_certificate(dns=names)
    ca, cert = x509.load_pem_x509_certificate(ca_pem), x509.load_pem_x509_certificate(cert_pem)
    cert.verify_directly_issued_by(ca)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert tuple(sans.get_values_for_type(x509.DNSName)) == names
    usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.SERVER_AUTH in usage
    key = serialization.load_pem_private_key(key_pem, password=None)
    assert key.public_key() == cert.public_key()


def test_an_ip_certificate_names_the_address() -> None:
    _, cert_pem, _ = serving_certificate(ips=("127.0.0.1",))
    cert = x509.load_pem_x509_certificate(cert_pem)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]


def test_a_certificate_needs_a_name() -> None:
    with pytest.raises(ValueError, match="DNS name or an IP address"):
        serving_certificate()


def test_the_url_server_is_made_without_loading_cryptography() -> None:
    code = (
        "import sys\n"
        "from atoll.kube import webhook\n"
        "s = webhook.make_url_server(addr='127.0.0.1', port=9443, host='127.0.0.1')\n"
        "assert s.ca.startswith(b'-----BEGIN CERTIFICATE-----'), s.ca[:40]\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'cryptography'))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO / "operator",
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "[]"
