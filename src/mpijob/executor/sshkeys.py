"""A fresh SSH key pair per job, as the reference operator makes (ECDSA P-521)."""

from __future__ import annotations

import base64

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec


def ssh_key_pair() -> dict[str, str]:
    """Secret data (base64) for keys ssh-privatekey (PEM) and ssh-publickey (OpenSSH format)."""
    key = ec.generate_private_key(ec.SECP521R1())
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
    )
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    return {
        "ssh-privatekey": base64.b64encode(private).decode(),
        "ssh-publickey": base64.b64encode(public + b"\n").decode(),
    }
