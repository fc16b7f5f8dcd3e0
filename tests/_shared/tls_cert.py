"""A self-signed certificate for 127.0.0.1 and localhost, made by the ``openssl`` CLI, for
tests that serve TLS on loopback (``from tls_cert import self_signed``)."""

from __future__ import annotations

import subprocess
from pathlib import Path


def self_signed(directory: Path) -> tuple[Path, Path]:
    """``(cert.pem, key.pem)`` in ``directory``: RSA 2048, unencrypted key, valid two days."""
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
         "-out", str(cert), "-days", "2", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
        check=True, capture_output=True, timeout=60,
    )
    return cert, key
