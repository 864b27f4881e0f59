"""Extra etcd servers for the security tests: one serving TLS, one with user/password authentication.

Certificates are made with the openssl CLI (EC keys, near-instant) and authentication is switched on
with the `etcdctl` that ships next to the etcd binary, exactly as an operator would do it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from acidtables.core.embedded import EmbeddedEtcd, TlsFiles, find_etcd_binary


def make_tls_files(directory: Path) -> TlsFiles:
    """A throwaway CA and a server certificate for 127.0.0.1; skips the test without openssl."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl CLI not installed")
    directory.mkdir(parents=True, exist_ok=True)
    ec = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
    (directory / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
    steps = [
        f"req -x509 {ec} -keyout ca.key -out ca.pem -days 1 -subj /CN=test-ca",
        f"req {ec} -keyout server.key -out server.csr -subj /CN=127.0.0.1",
        "x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem -days 1 -extfile ext.cnf",
    ]
    for step in steps:
        subprocess.run([openssl, *step.split()], cwd=directory, check=True, capture_output=True, timeout=30)
    return TlsFiles(ca_file=directory / "ca.pem", cert_file=directory / "server.pem", key_file=directory / "server.key")


def etcdctl(server: EmbeddedEtcd, *args: str, ca_file: Path | None = None) -> str:
    binary = os.path.join(os.path.dirname(find_etcd_binary()), "etcdctl")
    tls = [f"--cacert={ca_file}"] if ca_file is not None else []
    done = subprocess.run(
        [binary, f"--endpoints={server.endpoint}", *tls, *args], check=True, capture_output=True, text=True, timeout=30
    )
    return done.stdout


def enable_auth(server: EmbeddedEtcd, user: str, password: str, *, ca_file: Path | None = None) -> None:
    """Create `user` with the root role and switch authentication on."""
    etcdctl(server, "user", "add", f"{user}:{password}", ca_file=ca_file)
    etcdctl(server, "user", "grant-role", user, "root", ca_file=ca_file)
    etcdctl(server, "auth", "enable", ca_file=ca_file)
