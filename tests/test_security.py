"""Secured etcd: client certificates (mutual TLS), users whose roles cover one key prefix each, and
secrets that never leave the process.

Everything runs against real etcd processes, set up as an operator would with the `etcdctl` next to the
etcd binary: a server that demands client certificates signed by its CA, and a server with
authentication on where alice may read and write /tenant-a, bob /tenant-b, and carol only read
/tenant-a. Each test works under a fresh prefix inside its tenant's, so the servers are shared.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from uuid import uuid4

import pyetcd
import pytest
from tests.helpers.servers import add_prefix_user, enable_auth, issue_client_certificate, make_tls_files
from tests.helpers.tables import staged_parquet
from tests.helpers.timers import SkippingTimer

from acidtables import Catalog, CommitInfo, Table
from acidtables.cli.main import main
from acidtables.cli.output import EXIT_ERROR
from acidtables.core.coordination.coordinator import Coordinator
from acidtables.core.coordination.embedded import EmbeddedEtcd, TlsFiles, free_port
from acidtables.core.coordination.feed import ChangeFeed, Resync
from acidtables.core.coordination.waiting import wait_for
from acidtables.core.log.services import Services
from acidtables.core.settings import CommitSettings, EtcdSettings, Settings
from acidtables.errors import (
    AcidTablesError,
    CommitOutcomeUnknown,
    ConfigurationError,
    CoordinatorPermissionDenied,
    CoordinatorUnavailable,
)

SCHEMA = "id BIGINT, dt STRING"
#: how long an unreachable etcd would be retried; the TLS and permission failures must come far sooner
PATIENT_SECONDS = 20.0


def _catalog(
    etcd: EtcdSettings, warehouse: Path, *, timer: SkippingTimer | None = None, commit: CommitSettings | None = None
) -> Catalog:
    """A catalog whose retry pauses go through `timer`, so a test sees whether it waited anything out."""
    settings = Settings(etcd=etcd, warehouse=str(warehouse), commit=commit or CommitSettings())
    if timer is None:
        return Catalog(settings)
    return Catalog(settings, services=Services(settings, Coordinator(etcd, timer=timer), timer=timer))


def _commit_one(table: Table, dt: str = "a") -> CommitInfo:
    with table.begin("insert_into") as tx:
        tx.add_files([staged_parquet(tx, {"dt": dt})])
        return tx.commit()


def _state(table: Table) -> tuple[int, list[str]]:
    """What another user must not be able to change: the version and the active files."""
    snapshot = table.snapshot()
    return snapshot.version, sorted(snapshot.files_by_path)


# --- 1. client certificates (etcd --client-cert-auth) ---------------------------------------------------


@dataclass(frozen=True)
class MutualTls:
    server: EmbeddedEtcd
    tls: TlsFiles
    #: (certificate, key) signed by the server's CA, CN alice
    client: tuple[Path, Path]
    #: (certificate, key) signed by another CA, CN alice as well
    stranger: tuple[Path, Path]


@pytest.fixture(scope="module")
def mutual_tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MutualTls]:
    directory = tmp_path_factory.mktemp("mtls-etcd")
    tls = make_tls_files(directory / "certs", client_cert_auth=True)
    client = issue_client_certificate(directory / "certs", "alice")
    make_tls_files(directory / "other-ca")
    stranger = issue_client_certificate(directory / "other-ca", "alice")
    with EmbeddedEtcd(directory / "etcd", tls=tls) as server:
        yield MutualTls(server, tls, client, stranger)


def _mtls_settings(mtls: MutualTls, prefix: str, cert: tuple[Path, Path] | None) -> EtcdSettings:
    return EtcdSettings(
        (mtls.server.endpoint,),
        prefix=prefix,
        ca_file=str(mtls.tls.ca_file),
        cert_file=str(cert[0]) if cert else None,
        key_file=str(cert[1]) if cert else None,
        unavailable_timeout_seconds=PATIENT_SECONDS,
    )


def test_catalog_with_a_client_certificate_commits_and_reads(
    mutual_tls: MutualTls, etcd_prefix: str, tmp_path: Path
) -> None:
    settings = _mtls_settings(mutual_tls, etcd_prefix, mutual_tls.client)
    with _catalog(settings, tmp_path) as writing, _catalog(settings, tmp_path) as reading:
        table = writing.create_table("ns.secure", schema=SCHEMA, partition_by=["dt"])
        info = _commit_one(table)

        assert info.version == 1
        assert _state(reading.table("ns.secure")) == _state(table)


def test_catalog_without_a_client_certificate_is_told_to_set_the_cert_and_key_files(
    mutual_tls: MutualTls, etcd_prefix: str, tmp_path: Path
) -> None:
    timer = SkippingTimer()
    with (
        _catalog(_mtls_settings(mutual_tls, etcd_prefix, None), tmp_path, timer=timer) as catalog,
        pytest.raises(ConfigurationError, match="demands a client certificate") as caught,
    ):
        catalog.list_tables()

    message = str(caught.value)
    assert "ACIDTABLES_ETCD_CERT_FILE" in message and "ACIDTABLES_ETCD_KEY_FILE" in message
    assert mutual_tls.server.endpoint in message
    assert timer.paused < 1  # told at once, not after the 20 s unavailable deadline


def test_client_certificate_from_another_ca_is_named_as_refused(
    mutual_tls: MutualTls, etcd_prefix: str, tmp_path: Path
) -> None:
    timer = SkippingTimer()
    cert, _ = mutual_tls.stranger
    with (
        _catalog(_mtls_settings(mutual_tls, etcd_prefix, mutual_tls.stranger), tmp_path, timer=timer) as catalog,
        pytest.raises(ConfigurationError, match=f"refused the client certificate ACIDTABLES_ETCD_CERT_FILE={cert}"),
    ):
        catalog.create_table("ns.t", schema=SCHEMA)

    assert timer.paused < 1


def _encrypted_copy(key: Path, directory: Path) -> Path:
    out = directory / "encrypted.key"
    subprocess.run(
        ["openssl", "pkey", "-in", str(key), "-out", str(out), "-aes256", "-passout", "pass:secret"],
        check=True,
        capture_output=True,
        timeout=30,
    )
    return out


@pytest.mark.parametrize(
    ("problem", "expected"),
    [
        ("missing certificate", r"ACIDTABLES_ETCD_CERT_FILE=\S+ cannot be read"),
        ("key is a directory", r"ACIDTABLES_ETCD_KEY_FILE=\S+ cannot be read"),
        ("key of another certificate", r"ACIDTABLES_ETCD_CERT_FILE=\S+ and ACIDTABLES_ETCD_KEY_FILE=\S+ are not"),
        ("key not PEM", r"ACIDTABLES_ETCD_CERT_FILE=\S+ and ACIDTABLES_ETCD_KEY_FILE=\S+ are not"),
        ("encrypted key", r"ACIDTABLES_ETCD_CERT_FILE=\S+ and ACIDTABLES_ETCD_KEY_FILE=\S+ are not"),
    ],
)
def test_an_unusable_client_certificate_or_key_is_named_with_its_variable(
    mutual_tls: MutualTls, etcd_prefix: str, tmp_path: Path, problem: str, expected: str
) -> None:
    cert, key = mutual_tls.client
    garbage = tmp_path / "garbage.key"
    garbage.write_text("-----BEGIN PRIVATE KEY-----\nnot a key\n-----END PRIVATE KEY-----\n")
    files = {
        "missing certificate": (tmp_path / "nope.pem", key),
        "key is a directory": (cert, tmp_path),
        "key of another certificate": (cert, mutual_tls.stranger[1]),
        "key not PEM": (cert, garbage),
        "encrypted key": (cert, _encrypted_copy(key, tmp_path)),
    }[problem]
    timer = SkippingTimer()
    with (
        _catalog(_mtls_settings(mutual_tls, etcd_prefix, files), tmp_path, timer=timer) as catalog,
        pytest.raises(ConfigurationError, match=expected) as caught,
    ):
        catalog.list_tables()

    assert mutual_tls.server.endpoint in str(caught.value)
    assert timer.paused == 0  # found before any connection attempt


def test_client_certificate_common_name_is_the_etcd_user_and_its_role_limits_it_to_its_prefix(
    tmp_path: Path,
) -> None:
    """etcd with both --client-cert-auth and authentication takes a certificate's CN as the user."""
    tls = make_tls_files(tmp_path / "certs", client_cert_auth=True)
    root = issue_client_certificate(tmp_path / "certs", "root")
    alice = issue_client_certificate(tmp_path / "certs", "alice")
    with EmbeddedEtcd(tmp_path / "etcd", tls=tls) as server:
        add_prefix_user(server, "alice", None, "/tenant-a", ca_file=tls.ca_file, client_cert=root)
        enable_auth(server, "root", uuid4().hex, ca_file=tls.ca_file, client_cert=root)

        def settings(prefix: str) -> EtcdSettings:
            return EtcdSettings(
                (server.endpoint,),
                prefix=prefix,
                ca_file=str(tls.ca_file),
                cert_file=str(alice[0]),
                key_file=str(alice[1]),
                unavailable_timeout_seconds=PATIENT_SECONDS,
            )

        with _catalog(settings("/tenant-a/t"), tmp_path / "a") as own:
            assert _commit_one(own.create_table("ns.t", schema=SCHEMA, partition_by=["dt"])).version == 1
        with (
            _catalog(settings("/tenant-b/t"), tmp_path / "b") as foreign,
            pytest.raises(CoordinatorPermissionDenied, match=f"common name of ACIDTABLES_ETCD_CERT_FILE={alice[0]}"),
        ):
            foreign.list_tables()


# --- 2. roles limited to a prefix ----------------------------------------------------------------------


@dataclass(frozen=True)
class Tenants:
    """An etcd with authentication on: alice may read and write /tenant-a, bob /tenant-b, carol may
    only read /tenant-a; root holds the root role. Every password is recognisable, to grep for."""

    server: EmbeddedEtcd
    passwords: dict[str, str]

    def settings(self, user: str, prefix: str, *, password: str | None = None) -> EtcdSettings:
        return EtcdSettings(
            (self.server.endpoint,),
            prefix=prefix,
            user=user,
            password=password if password is not None else self.passwords[user],
            unavailable_timeout_seconds=PATIENT_SECONDS,
        )

    def root_client(self) -> pyetcd.MultiEndpointEtcd3Client:
        """A plain pyetcd client with the root role, to read every stored byte past acidtables."""
        client = pyetcd.client(
            self.server.host, self.server.client_port, user="root", password=self.passwords["root"], timeout=5
        )
        client.call_credentials = None  # plain http: the token goes as metadata (as core.coordination.connection does)
        return client


def _password() -> str:
    return f"S3cret-pw-{uuid4().hex}"


@pytest.fixture(scope="module")
def tenants(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tenants]:
    directory = tmp_path_factory.mktemp("tenants-etcd")
    passwords = {user: _password() for user in ("alice", "bob", "carol", "root")}
    with EmbeddedEtcd(directory / "etcd") as server:
        add_prefix_user(server, "alice", passwords["alice"], "/tenant-a")
        add_prefix_user(server, "bob", passwords["bob"], "/tenant-b")
        add_prefix_user(server, "carol", passwords["carol"], "/tenant-a", permission="read")
        enable_auth(server, "root", passwords["root"])
        yield Tenants(server, passwords)


@pytest.fixture
def tenant_a() -> str:
    """A fresh prefix inside alice's (and carol's) rights, so tests sharing the server stay apart."""
    return f"/tenant-a/{uuid4().hex}"


@pytest.fixture
def alice(tenants: Tenants, tenant_a: str, tmp_path: Path) -> Iterator[Catalog]:
    # small windows, so commits also checkpoint and archive; transactions register in flight at once
    commit = CommitSettings(checkpoint_interval=3, log_window_versions=4, register_after_seconds=0)
    with _catalog(tenants.settings("alice", tenant_a), tmp_path / "warehouse", commit=commit) as catalog:
        yield catalog


@pytest.fixture
def alices_table(alice: Catalog) -> Table:
    table = alice.create_table("sales.orders", schema=SCHEMA, partition_by=["dt"])
    for dt in ("a", "b"):
        _commit_one(table, dt)
    return table


def test_user_with_readwrite_on_its_prefix_writes_conflicts_alters_and_drops(alice: Catalog) -> None:
    table = alice.create_table("sales.orders", schema=SCHEMA, partition_by=["dt"])
    infos = [_commit_one(table, dt) for dt in ("a", "b", "a", "b", "a", "b", "a")]
    # a lost race: the loser is rebased (its conflict and retry events are recorded under the prefix)
    first, second = table.begin("insert_into"), table.begin("insert_into")
    first.add_files([staged_parquet(first, {"dt": "a"})])
    second.add_files([staged_parquet(second, {"dt": "b"})])
    first.commit()
    assert second.commit().retries == 1
    altered = alice.alter_table("sales.orders", properties={"owner": "tenant-a"})
    alice.create_table("sales.scratch", schema=SCHEMA)

    alice.drop_table("sales.scratch", delete_data=True)

    assert [i.version for i in infos] == list(range(1, 8))
    assert altered.version == 10
    assert alice.list_tables() == ["sales.orders"]
    assert alice.table("sales.orders").metadata.properties["owner"] == "tenant-a"
    wait_for(
        lambda: any(e.get("kind") == "retry" for e in alice.services.coordinator.list_events(table.table_id)),
        timeout_seconds=10,
        message="the retry event recorded under the prefix",
    )


def test_user_with_readwrite_on_its_prefix_reads_history_time_travel_and_maintains(
    alice: Catalog, alices_table: Table
) -> None:
    table = alices_table
    running = table.begin("insert_into")
    running.add_files([staged_parquet(running, {"dt": "c"})])
    wait_for(lambda: [t.txn_id for t in table.in_flight()] == [running.txn_id], 10, message="registered in flight")
    assert table.cleanup(grace_seconds=0).kept_inflight == (running.txn_id,)
    running.abort()
    assert table.in_flight() == []
    infos = [_commit_one(table, dt) for dt in ("a", "b", "a", "b")]

    assert table.find_commit(infos[-1].txn_id) == 6
    assert [h.version for h in table.history()] == [6, 5, 4, 3, 2, 1, 0]
    assert len(table.changes(1, 6)) > 0
    assert table.snapshot(version=1).version == 1
    assert infos[0].time_version is not None and table.version_at(infos[0].time_version) == 3
    assert table.archive(keep_versions=2).archived_upto >= 1
    assert table.expire(retain_versions=2, retain_duration="0s", force=True).oldest_version_kept == 5
    assert table.vacuum(retain_duration="0s", force=True).failed == ()
    assert all(not check.problems for check in table.fsck().checks)


def test_user_with_readwrite_on_its_prefix_follows_the_change_feed_and_leads(
    alice: Catalog, alices_table: Table
) -> None:
    coordinator = alice.services.coordinator
    feed = ChangeFeed(coordinator)
    try:
        assert isinstance(feed.start(), Resync)
        landed = _commit_one(alices_table)
        seen: list[int] = []

        def head_seen() -> bool:
            changes = feed.next(0.2)
            if isinstance(changes, list):
                seen.extend(int(c.value["version"]) for c in changes if c.kind == "head" and c.value)
            return landed.version in seen

        wait_for(head_seen, timeout_seconds=10, message="the commit's head change reached the feed")
    finally:
        feed.close()
    lease, holder = coordinator.try_lead("operator", "me", 5)
    assert (lease is not None, holder) == (True, None)
    coordinator.resign(lease)
    assert coordinator.alarms() == []
    assert all(u.error is None for u in coordinator.endpoint_usage())


def test_reclaiming_etcd_space_needs_the_root_role_and_says_so(alice: Catalog, tenant_a: str) -> None:
    with pytest.raises(CoordinatorPermissionDenied, match="root role") as caught:
        alice.services.coordinator.reclaim_space()

    assert (caught.value.user, caught.value.prefix) == ("alice", tenant_a)
    assert "defragmentation" in str(caught.value)


@pytest.mark.parametrize(
    "action",
    ["list_tables", "table", "create_table", "drop_table", "alter_table"],
)
def test_user_of_another_prefix_cannot_read_or_change_its_tables(
    tenants: Tenants, tenant_a: str, alices_table: Table, tmp_path: Path, action: str
) -> None:
    before = _state(alices_table)
    timer = SkippingTimer()
    actions: dict[str, Callable[[Catalog], object]] = {
        "list_tables": lambda c: c.list_tables(),
        "table": lambda c: c.table("sales.orders").snapshot(),
        "create_table": lambda c: c.create_table("sales.orders2", schema=SCHEMA),
        "drop_table": lambda c: c.drop_table("sales.orders", delete_data=True),
        "alter_table": lambda c: c.alter_table("sales.orders", properties={"owner": "bob"}),
    }
    with (
        _catalog(tenants.settings("bob", tenant_a), tmp_path / "warehouse", timer=timer) as bob,
        pytest.raises(CoordinatorPermissionDenied) as caught,
    ):
        actions[action](bob)

    assert (caught.value.user, caught.value.prefix) == ("bob", tenant_a)
    assert "etcd user 'bob'" in str(caught.value) and f"keys under {tenant_a}" in str(caught.value)
    assert timer.paused == 0  # a refusal, not an outage retried until the deadline
    assert _state(alices_table) == before
    assert all(os.path.exists(os.path.join(alices_table.location, path)) for path in before[1])


def test_user_of_another_prefix_keeps_working_in_its_own(
    tenants: Tenants, alices_table: Table, alice: Catalog, tmp_path: Path
) -> None:
    before = _state(alices_table)
    with _catalog(tenants.settings("bob", f"/tenant-b/{uuid4().hex}"), tmp_path / "bob") as bob:
        bobs = bob.create_table("sales.orders", schema=SCHEMA, partition_by=["dt"])
        assert _commit_one(bobs).version == 1
        assert bob.list_tables() == ["sales.orders"] and bobs.table_id != alices_table.table_id

    assert _state(alices_table) == before and alice.list_tables() == ["sales.orders"]


def test_read_only_user_reads_but_its_commit_is_refused_at_once_and_leaves_nothing(
    tenants: Tenants, tenant_a: str, alices_table: Table, tmp_path: Path
) -> None:
    """Regression: the refused compare-and-swap was taken for a lost answer and then for a lost race,
    so a user without write rights was rebased until CommitRetriesExhausted said the table was busy."""
    before = _state(alices_table)
    timer = SkippingTimer()
    with _catalog(tenants.settings("carol", tenant_a), tmp_path / "warehouse", timer=timer) as carol:
        table = carol.table("sales.orders")
        assert _state(table) == before
        tx = table.begin("insert_into")
        staged = staged_parquet(tx, {"dt": "a"})
        tx.add_files([staged])

        with pytest.raises(CoordinatorPermissionDenied, match="etcd refused the commit to etcd user 'carol'") as caught:
            tx.commit()

    assert not isinstance(caught.value, CommitOutcomeUnknown)
    assert "readwrite" in str(caught.value) and "Nothing was committed" in str(caught.value)
    assert timer.paused == 0
    assert not os.path.exists(staged.path)
    assert _state(alices_table) == before


# --- 3. secrets never leak -------------------------------------------------------------------------------


def _error_texts(exc: BaseException) -> str:
    """Everything an error can show: str and repr of it and of every error in its chain, and the
    formatted traceback (what --verbose and an uncaught error print)."""
    texts = ["".join(traceback.format_exception(exc))]
    seen: BaseException | None = exc
    while seen is not None:
        texts += [str(seen), repr(seen)]
        seen = seen.__cause__ or seen.__context__
    return "\n".join(texts)


def _logged(caplog: pytest.LogCaptureFixture) -> str:
    formatter = logging.Formatter("%(name)s %(levelname)s %(message)s")
    return "\n".join(formatter.format(record) for record in caplog.records)


def test_settings_never_show_the_password() -> None:
    password = _password()
    env = {
        "ACIDTABLES_ETCD_ENDPOINTS": "http://127.0.0.1:2379",
        "ACIDTABLES_WAREHOUSE": "/data",
        "ACIDTABLES_ETCD_USER": "alice",
        "ACIDTABLES_ETCD_PASSWORD": password,
    }

    settings = Settings.from_env(env)

    assert settings.etcd.password == password
    for text in (repr(settings), str(settings), repr(settings.etcd), str(settings.etcd)):
        assert password not in text and "alice" in text


def test_endpoint_with_credentials_in_its_url_is_refused_without_echoing_them() -> None:
    password = _password()

    with pytest.raises(ConfigurationError, match="carries credentials") as caught:
        EtcdSettings((f"http://alice:{password}@127.0.0.1:2379",))

    assert password not in _error_texts(caught.value)
    assert "http://***@127.0.0.1:2379" in str(caught.value) and "ACIDTABLES_ETCD_PASSWORD" in str(caught.value)


@pytest.mark.parametrize("failure", ["wrong password", "permission denied", "etcd unreachable"])
def test_errors_and_debug_logs_never_show_the_password(
    tenants: Tenants, tenant_a: str, tmp_path: Path, caplog: pytest.LogCaptureFixture, failure: str
) -> None:
    caplog.set_level(logging.DEBUG)
    if failure == "wrong password":
        password = _password()
        settings = tenants.settings("alice", tenant_a, password=password)
        expected: type[AcidTablesError] = ConfigurationError
    elif failure == "permission denied":
        password, settings = tenants.passwords["bob"], tenants.settings("bob", tenant_a)
        expected = CoordinatorPermissionDenied
    else:
        password = tenants.passwords["alice"]
        settings = EtcdSettings(
            (f"http://127.0.0.1:{free_port()}",),
            prefix=tenant_a,
            user="alice",
            password=password,
            unavailable_timeout_seconds=2,
        )
        expected = CoordinatorUnavailable

    with _catalog(settings, tmp_path, timer=SkippingTimer()) as catalog, pytest.raises(expected) as caught:
        catalog.create_table("sales.orders", schema=SCHEMA)

    assert password not in _error_texts(caught.value)
    assert password not in _logged(caplog)


def test_commit_records_and_every_stored_key_never_hold_the_password(
    tenants: Tenants, tenant_a: str, alice: Catalog, alices_table: Table, tmp_path: Path
) -> None:
    alice.alter_table("sales.orders", properties={"owner": "tenant-a"})
    alices_table.archive(keep_versions=1)
    assert alice.services.flush()  # the checkpoints written off the commit path are stored too
    client = tenants.root_client()
    try:
        stored = [(meta.key, value) for value, meta in client.get_prefix(tenant_a + "/")]
    finally:
        client.close()
    assert len(stored) > 5
    files = [path for path in (tmp_path / "warehouse").rglob("*") if path.is_file()]
    assert any("_acidtables" in str(path) for path in files)  # checkpoints and archive segments too

    password = tenants.passwords["alice"].encode()
    assert [key for key, value in stored if password in key or password in value] == []
    assert [path for path in files if password in path.read_bytes()] == []


def _cli_settings(
    monkeypatch: pytest.MonkeyPatch, tenants: Tenants, prefix: str, tmp_path: Path, user: str, password: str
) -> None:
    """The CLI's settings, as a user would give them: environment variables."""
    monkeypatch.setenv("ACIDTABLES_ETCD_ENDPOINTS", tenants.server.endpoint)
    monkeypatch.setenv("ACIDTABLES_ETCD_PREFIX", prefix)
    monkeypatch.setenv("ACIDTABLES_WAREHOUSE", str(tmp_path / "warehouse"))
    monkeypatch.setenv("ACIDTABLES_ETCD_USER", user)
    monkeypatch.setenv("ACIDTABLES_ETCD_PASSWORD", password)


def _run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize(
    "argv", [("tables",), ("describe", "sales.orders"), ("history", "sales.orders"), ("fsck", "sales.orders")]
)
def test_cli_json_and_verbose_output_never_show_the_password(
    tenants: Tenants,
    tenant_a: str,
    alices_table: Table,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    argv: tuple[str, ...],
) -> None:
    aws_secret = _password()
    _cli_settings(monkeypatch, tenants, tenant_a, tmp_path, "alice", tenants.passwords["alice"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", aws_secret)

    code, out, err = _run_cli(capsys, "--json", "--verbose", *argv)

    assert code == 0, err
    assert json.loads(out)
    for secret in (tenants.passwords["alice"], aws_secret):
        assert secret not in out and secret not in err


@pytest.mark.parametrize("failure", ["wrong password", "permission denied"])
def test_cli_error_objects_and_tracebacks_never_show_the_password(
    tenants: Tenants,
    tenant_a: str,
    alices_table: Table,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    failure: str,
) -> None:
    user, password = ("alice", _password()) if failure == "wrong password" else ("bob", tenants.passwords["bob"])
    _cli_settings(monkeypatch, tenants, tenant_a, tmp_path, user, password)

    code, out, err = _run_cli(capsys, "--json", "--verbose", "describe", "sales.orders")

    # --verbose prints the traceback before the error object, which is the last JSON document on stderr
    document = json.loads(err[err.rindex("\n{") :])
    assert code == EXIT_ERROR  # a refusal, not etcd unavailable (exit 4)
    assert document["error"] == ("ConfigurationError" if failure == "wrong password" else "CoordinatorPermissionDenied")
    assert password not in out and password not in err
