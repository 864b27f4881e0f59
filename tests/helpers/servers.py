"""Extra etcd servers for the security tests: serving TLS (optionally demanding client certificates), with
user/password authentication, and with users whose roles cover one key prefix each.

Certificates are made with the openssl CLI (EC keys, near-instant) and authentication is switched on
with the `etcdctl` that ships next to the etcd binary, exactly as an operator would do it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from acidtables.core.coordination.embedded import EmbeddedEtcd, TlsFiles, find_etcd_binary

_EC_KEY = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"


def _openssl(directory: Path, *steps: str) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl CLI not installed")
    for step in steps:
        subprocess.run([openssl, *step.split()], cwd=directory, check=True, capture_output=True, timeout=30)


#: the extensions a real CA gives its own certificate and the ones it issues; Python 3.13's strict
#: verification (VERIFY_X509_STRICT) refuses a chain without them
_CA_EXTENSIONS = (
    "basicConstraints=critical,CA:TRUE\nkeyUsage=critical,keyCertSign,cRLSign\n"
    "subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid:always\n"
)
_ISSUED_EXTENSIONS = (
    "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\n"
    "subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid,issuer\n"
)


def make_tls_files(
    directory: Path,
    *,
    client_cert_auth: bool = False,
    addresses: tuple[str, ...] = ("127.0.0.1",),
    bare_ca: bool = False,
) -> TlsFiles:
    """A throwaway CA and a server certificate for `addresses` (IP SANs; 127.0.0.1 by default), with the
    extensions a real CA sets (so Python 3.13's strict verification and gRPC's both accept them); skips
    the test without openssl.

    With `client_cert_auth`, etcd will demand a client certificate signed by the CA, and one is issued
    for the health probe (CN `probe`; etcd with authentication enabled takes the CN as the user name).
    `bare_ca`: the CA certificate has only what `openssl req -x509` gives it (no keyUsage), as
    hand-made CAs often do, which strict verification refuses."""
    directory.mkdir(parents=True, exist_ok=True)
    names = ",".join(f"IP:{address}" for address in addresses)
    (directory / "ca.cnf").write_text(_CA_EXTENSIONS)
    (directory / "ext.cnf").write_text(f"{_ISSUED_EXTENSIONS}subjectAltName={names}\nextendedKeyUsage=serverAuth\n")
    ca_request = f"req -x509 {_EC_KEY} -keyout ca.key -out ca.pem -days 1 -subj /CN=test-ca"
    if bare_ca:
        ca_steps = [ca_request]
    else:
        ca_steps = [
            f"req {_EC_KEY} -keyout ca.key -out ca.csr -subj /CN=test-ca",
            "x509 -req -in ca.csr -signkey ca.key -out ca.pem -days 1 -extfile ca.cnf",
        ]
    _openssl(
        directory,
        *ca_steps,
        f"req {_EC_KEY} -keyout server.key -out server.csr -subj /CN={addresses[0]}",
        "x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem -days 1 -extfile ext.cnf",
    )
    tls = TlsFiles(ca_file=directory / "ca.pem", cert_file=directory / "server.pem", key_file=directory / "server.key")
    if not client_cert_auth:
        return tls
    cert, key = issue_client_certificate(directory, "probe")
    return TlsFiles(tls.ca_file, tls.cert_file, tls.key_file, client_cert_file=cert, client_key_file=key)


def issue_client_certificate(ca_directory: Path, name: str) -> tuple[Path, Path]:
    """A client certificate (extendedKeyUsage=clientAuth, CN `name`) signed by the CA `make_tls_files`
    made in `ca_directory`: (certificate, key)."""
    (ca_directory / f"{name}.cnf").write_text(f"{_ISSUED_EXTENSIONS}extendedKeyUsage=clientAuth\n")
    _openssl(
        ca_directory,
        f"req {_EC_KEY} -keyout {name}.key -out {name}.csr -subj /CN={name}",
        f"x509 -req -in {name}.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out {name}.pem -days 1 "
        f"-extfile {name}.cnf",
    )
    return ca_directory / f"{name}.pem", ca_directory / f"{name}.key"


def etcdctl(
    server: EmbeddedEtcd, *args: str, ca_file: Path | None = None, client_cert: tuple[Path, Path] | None = None
) -> str:
    """Run the etcdctl next to the etcd binary; `client_cert` (certificate, key) for an etcd that demands one."""
    binary = os.path.join(os.path.dirname(find_etcd_binary()), "etcdctl")
    tls = [f"--cacert={ca_file}"] if ca_file is not None else []
    if client_cert is not None:
        tls += [f"--cert={client_cert[0]}", f"--key={client_cert[1]}"]
    done = subprocess.run(
        [binary, f"--endpoints={server.endpoint}", *tls, *args], check=True, capture_output=True, text=True, timeout=30
    )
    return done.stdout


def enable_auth(
    server: EmbeddedEtcd,
    user: str,
    password: str,
    *,
    ca_file: Path | None = None,
    client_cert: tuple[Path, Path] | None = None,
) -> None:
    """Create `user` with the root role and switch authentication on."""
    etcdctl(server, "user", "add", f"{user}:{password}", ca_file=ca_file, client_cert=client_cert)
    etcdctl(server, "user", "grant-role", user, "root", ca_file=ca_file, client_cert=client_cert)
    etcdctl(server, "auth", "enable", ca_file=ca_file, client_cert=client_cert)


def add_prefix_user(
    server: EmbeddedEtcd,
    user: str,
    password: str | None,
    prefix: str,
    *,
    permission: str = "readwrite",
    client_cert: tuple[Path, Path] | None = None,
    ca_file: Path | None = None,
) -> None:
    """A user whose only role (`role-<user>`) grants `permission` on the keys under `prefix`, as a tenant
    is set up; call before `enable_auth`. Without a password the user can log in only by a client
    certificate whose common name is `user`."""

    def ctl(*args: str) -> None:
        etcdctl(server, *args, ca_file=ca_file, client_cert=client_cert)

    ctl("role", "add", f"role-{user}")
    ctl("role", "grant-permission", "--prefix=true", f"role-{user}", permission, prefix)
    if password is None:
        ctl("user", "add", user, "--no-password")
    else:
        ctl("user", "add", f"{user}:{password}")
    ctl("user", "grant-role", user, f"role-{user}")
