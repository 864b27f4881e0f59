"""Why a TLS client refuses etcd's certificate, in Python's own words.

gRPC reports a refused server certificate as a bare `CERTIFICATE_VERIFY_FAILED`, and an HTTPS probe that
is refused looks, from outside, like a server that never became healthy. Both leave the user guessing
between a wrong CA, an expired certificate, a missing IP SAN and (since Python 3.13, which verifies X.509
strictly) a CA made without the extensions a real CA puts in. One handshake with Python's `ssl`, which
reports the exact check that failed, turns that into a sentence.
"""

from __future__ import annotations

import socket
import ssl
from pathlib import Path
from urllib.parse import urlsplit

__all__ = ["STRICT_HINT", "describe", "refusal"]

#: what Python 3.13's strict verification (ssl.VERIFY_X509_STRICT in create_default_context) asks of
#: certificates that older Pythons, OpenSSL's own defaults and gRPC accept
STRICT_HINT = (
    "Python 3.13 and later verify certificates strictly (ssl.VERIFY_X509_STRICT): a CA certificate needs "
    "keyUsage keyCertSign and a critical basicConstraints CA:TRUE, and a certificate it issues an "
    "authorityKeyIdentifier, as every real CA issues them"
)

_STRICT_WORDS = ("key usage", "basic constraints", "key identifier", "keyusage", "strict")


def describe(exc: ssl.SSLCertVerificationError) -> str:
    """The check that refused a certificate, and what strict verification asks for where that was it."""
    reason = str(exc.verify_message or exc.reason or exc)
    if any(word in reason.lower() for word in _STRICT_WORDS):
        return f"{reason} ({STRICT_HINT})"
    return reason


def refusal(
    url: str,
    ca_file: str | Path,
    *,
    cert_file: str | Path | None = None,
    key_file: str | Path | None = None,
    timeout_seconds: float = 2.0,
) -> str | None:
    """Why Python's TLS refuses the certificate `url`'s server presents when verified against `ca_file`
    (the verification's own message, with what strict verification asks for where that is the cause), or
    None when it accepts it, or when the server cannot be reached or speaks no TLS: only a definite
    verdict on the certificate is reported, never a guess from a connection that failed."""
    parts = urlsplit(url)
    host, port = parts.hostname, parts.port
    if host is None or port is None:
        return None
    try:
        context = ssl.create_default_context(cafile=str(ca_file))
        if cert_file is not None and key_file is not None:
            context.load_cert_chain(str(cert_file), str(key_file))
    except (OSError, ssl.SSLError):  # unreadable files are reported, with their variable, where they are named
        return None
    try:
        with (
            socket.create_connection((host, port), timeout=timeout_seconds) as raw,
            context.wrap_socket(raw, server_hostname=host),
        ):
            return None
    except ssl.SSLCertVerificationError as exc:
        return describe(exc)
    except (OSError, ssl.SSLError):  # no answer, or no TLS: not a verdict on the certificate
        return None
