"""The testbed's own PKI: one CA, serving certificates, client certificates and the service-account key.

ECDSA P-256 everywhere: every Kubernetes component accepts it and key generation is instant.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# Long enough that a testbed left running never sees an expiry, short enough to look sane.
_VALIDITY = dt.timedelta(days=3650)
# Certificates are back-dated a little so clock jitter between issuing and first use never matters.
_BACKDATE = dt.timedelta(minutes=5)


@dataclass(frozen=True)
class ClientIdentity:
    """A user the API server authenticates by client certificate: CN is the user, O the groups."""

    user: str
    groups: tuple[str, ...] = ()


@dataclass(frozen=True)
class Pki:
    """Paths of the files `create_pki` writes."""

    root: Path

    @property
    def ca_cert(self) -> Path:
        return self.root / "ca.crt"

    @property
    def ca_key(self) -> Path:
        return self.root / "ca.key"

    @property
    def sa_key(self) -> Path:
        return self.root / "sa.key"

    @property
    def sa_pub(self) -> Path:
        return self.root / "sa.pub"

    @property
    def apiserver_cert(self) -> Path:
        return self.root / "apiserver.crt"

    @property
    def apiserver_key(self) -> Path:
        return self.root / "apiserver.key"

    @property
    def serving_cert(self) -> Path:
        """Serving certificate for the other components' secure ports (localhost only)."""
        return self.root / "serving.crt"

    @property
    def serving_key(self) -> Path:
        return self.root / "serving.key"

    def client_cert(self, name: str) -> Path:
        return self.root / f"client-{name}.crt"

    def client_key(self, name: str) -> Path:
        return self.root / f"client-{name}.key"


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_private(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    data = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    # Created 0600 from the start rather than chmod-ed later, so the key is never world-readable.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _write_cert(path: Path, cert: x509.Certificate) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _name(common_name: str, organizations: Iterable[str] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations]
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(attrs)


def _key_usage(*, ca: bool) -> x509.KeyUsage:
    """Signatures for everyone; certificate and CRL signing only for the CA."""
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=ca,
        crl_sign=ca,
        encipher_only=False,
        decipher_only=False,
    )


def _new_ca() -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _new_key()
    now = dt.datetime.now(dt.UTC)
    name = _name("mpijob-testbed-ca")
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(_key_usage(ca=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def _issue(
    ca_cert: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    subject: x509.Name,
    *,
    server: bool,
    dns_names: Sequence[str] = (),
    ips: Sequence[str] = (),
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _new_key()
    now = dt.datetime.now(dt.UTC)
    usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(ca=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
    )
    if dns_names or ips:
        sans: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
        sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(ca_key, hashes.SHA256()), key


def create_pki(root: Path, *, apiserver_ips: Sequence[str], clients: dict[str, ClientIdentity]) -> Pki:
    """Write a fresh CA, the API server's serving certificate (valid for `apiserver_ips`, localhost and
    the in-cluster `kubernetes.default` names), a localhost serving certificate for the other components,
    a client certificate per entry of `clients` and the service-account signing key pair."""
    root.mkdir(parents=True, exist_ok=True)
    pki = Pki(root)
    ca_cert, ca_key = _new_ca()
    _write_cert(pki.ca_cert, ca_cert)
    _write_private(pki.ca_key, ca_key)

    in_cluster = ["kubernetes", "kubernetes.default", "kubernetes.default.svc"]
    in_cluster.append("kubernetes.default.svc.cluster.local")
    cert, key = _issue(
        ca_cert,
        ca_key,
        _name("kube-apiserver"),
        server=True,
        dns_names=["localhost", *in_cluster],
        ips=["127.0.0.1", *apiserver_ips],
    )
    _write_cert(pki.apiserver_cert, cert)
    _write_private(pki.apiserver_key, key)

    cert, key = _issue(
        ca_cert,
        ca_key,
        _name("mpijob-testbed-component"),
        server=True,
        dns_names=["localhost"],
        ips=["127.0.0.1"],
    )
    _write_cert(pki.serving_cert, cert)
    _write_private(pki.serving_key, key)

    for name, identity in clients.items():
        cert, key = _issue(ca_cert, ca_key, _name(identity.user, identity.groups), server=False)
        _write_cert(pki.client_cert(name), cert)
        _write_private(pki.client_key(name), key)

    sa_key = _new_key()
    _write_private(pki.sa_key, sa_key)
    pki.sa_pub.write_bytes(
        sa_key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return pki


def issue_leaf(
    pki: Pki,
    path_stem: Path,
    *,
    common_name: str,
    organizations: Sequence[str] = (),
    server: bool,
    dns_names: Sequence[str] = (),
    ips: Sequence[str] = (),
) -> tuple[Path, Path]:
    """Sign one more certificate with the testbed CA (e.g. a node's); writes <stem>.crt and <stem>.key."""
    ca_cert = x509.load_pem_x509_certificate(pki.ca_cert.read_bytes())
    ca_key = serialization.load_pem_private_key(pki.ca_key.read_bytes(), password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise TypeError("the testbed CA key is not an EC key")
    cert, key = _issue(ca_cert, ca_key, _name(common_name, organizations), server=server, dns_names=dns_names, ips=ips)
    crt, pem = path_stem.with_suffix(".crt"), path_stem.with_suffix(".key")
    _write_cert(crt, cert)
    _write_private(pem, key)
    return crt, pem


def self_signed() -> tuple[bytes, bytes]:
    """A fresh self-signed certificate and its key (PEM), for a component that insists on reading one."""
    cert, key = _new_ca()
    return (
        cert.public_bytes(serialization.Encoding.PEM),
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()),
    )
