"""Failures around a commit: writers killed mid-job, etcd killed and restarted, etcd unreachable, a commit
whose answer is lost, secured etcd, and the end of a transaction's life.

Everything runs against real etcd processes and real files. Crashes are real SIGKILLs of a separate
writer process that waits on stdin at the chosen point, and lost answers come from a TCP proxy that holds
etcd's replies back while the request itself still reaches etcd.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from tests.helpers.crash_writer import LEASE_TTL_SECONDS
from tests.helpers.processes import LineReader, kill_and_reap
from tests.helpers.servers import enable_auth, make_tls_files
from tests.helpers.tables import (
    CatalogSpec,
    committed_records,
    etcd_client,
    head_version,
    inflight_txns,
    log_versions,
    txn_version,
    write_part,
)
from tests.helpers.timers import SkippingTimer

from acidtables import Catalog, CommitInfo, Table
from acidtables.check.proxy import HoldingProxy
from acidtables.core.commit.txn_ids import lease_of
from acidtables.core.coordination.coordinator import Coordinator
from acidtables.core.coordination.embedded import EmbeddedEtcd, free_port
from acidtables.core.coordination.waiting import wait_for
from acidtables.core.log.services import Services
from acidtables.core.settings import CommitSettings, EtcdSettings, Settings
from acidtables.errors import (
    CommitOutcomeUnknown,
    ConfigurationError,
    CoordinatorUnavailable,
    TransactionClosedError,
)

TESTS_DIR = Path(__file__).resolve().parent
SCHEMA = "id BIGINT, dt STRING"


@pytest.fixture
def spec(etcd_server: EmbeddedEtcd, etcd_prefix: str, tmp_path: Path) -> CatalogSpec:
    return CatalogSpec(etcd_server.endpoint, etcd_prefix, str(tmp_path / "warehouse"))


@pytest.fixture
def table(catalog: Catalog) -> Table:
    return catalog.create_table("ns.events", schema=SCHEMA, partition_by=["dt"])


@pytest.fixture
def reader(spec: CatalogSpec) -> Iterator[Catalog]:
    """A catalog that took no part in the writes: its snapshots come from etcd and disk, not a cache."""
    catalog = spec.open()
    yield catalog
    catalog.close()


def _with_helpers_on_path() -> dict[str, str]:
    """The environment for `python -m helpers.<script>` children: this process's, plus the tests dir."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS_DIR), os.environ.get("PYTHONPATH", "")])}


def _relative(table: Table, path: str) -> str:
    return os.path.relpath(path, table.location)


def _commit_one(table: Table, name: str = "part-0.parquet") -> tuple[CommitInfo, str]:
    tx = table.begin("insert_into")
    f = write_part(tx.staging_dir, name, {"dt": "a"})
    tx.add_files([f])
    return tx.commit(), _relative(table, f.path)


# --- 1. a writer killed with SIGKILL at a chosen point ---------------------------------------------


@dataclass(frozen=True)
class CrashedWriter:
    txn_id: str
    staging_dir: str
    #: the last line it printed: the crash point it reached
    marker: str


CrashAt = Callable[[str], CrashedWriter]


@pytest.fixture
def crash_at(spec: CatalogSpec, table: Table, tmp_path: Path, etcd_server: EmbeddedEtcd) -> Iterator[CrashAt]:
    """Run the crash writer to a point, check its in-flight registration while it waits there, and SIGKILL it."""
    processes: list[subprocess.Popen[bytes]] = []
    env = _with_helpers_on_path()

    def run(point: str) -> CrashedWriter:
        log = tmp_path / f"writer-{point}.log"
        command = [sys.executable, "-m", "helpers.crash_writer", spec.endpoint, spec.prefix, spec.warehouse]
        with log.open("wb") as stderr:
            process = subprocess.Popen(
                [*command, table.name, point], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, env=env
            )
        processes.append(process)
        lines = LineReader(process)
        try:
            began = lines.next_line(timeout_seconds=30).split()
            marker = lines.next_line(timeout_seconds=30)
        except (TimeoutError, EOFError) as exc:
            kill_and_reap(process)
            raise AssertionError(f"{exc}; writer stderr:\n{log.read_text()}") from exc
        assert began[0] == "began"
        writer = CrashedWriter(began[1], began[2], marker)
        if point != "committed":
            # while it waits it is running, registered or not yet (it began less than a second ago):
            # cleanup keeps its staged files
            assert writer.txn_id in table.cleanup(grace_seconds=0).kept_inflight
        kill_and_reap(process)
        return writer

    yield run
    for process in processes:
        kill_and_reap(process)


def _wait_until_not_in_flight(spec: CatalogSpec, etcd_server: EmbeddedEtcd, table: Table, txn_id: str) -> None:
    """Until etcd sees the killed writer dead: its lease (which its transaction id names) expired, and
    with it any in-flight registration."""
    lease = lease_of(txn_id)
    assert lease is not None
    client = etcd_client(etcd_server.host, etcd_server.client_port)
    try:
        wait_for(
            lambda: (
                client.get_lease_info(lease).TTL <= 0
                and txn_id not in inflight_txns(client, spec.prefix, table.table_id)
            ),
            timeout_seconds=LEASE_TTL_SECONDS + 10,
            message=f"the lease of {txn_id} still alive {LEASE_TTL_SECONDS + 10} s after its writer died",
        )
    finally:
        client.close()


@pytest.mark.parametrize("point", ["staging", "staged"], ids=["while-staging", "between-staging-and-commit"])
def test_killed_writer_before_commit_leaves_no_visible_data_and_cleanup_removes_its_staging(
    point: str, crash_at: CrashAt, table: Table, spec: CatalogSpec, etcd_server: EmbeddedEtcd
) -> None:
    writer = crash_at(point)
    assert writer.marker == point

    assert table.version == 0
    assert table.snapshot().files == []
    assert table.find_commit(writer.txn_id) is None
    assert os.listdir(writer.staging_dir) != []  # it did write files before it died
    _wait_until_not_in_flight(spec, etcd_server, table, writer.txn_id)
    report = table.cleanup(grace_seconds=0)
    assert report.deleted == (_relative(table, writer.staging_dir),)
    assert not os.path.exists(writer.staging_dir)
    info, path = _commit_one(table)
    assert info.version == 1
    assert list(table.snapshot().files_by_path) == [path]


def test_killed_writer_right_after_commit_keeps_the_whole_commit_and_cleanup_keeps_its_files(
    crash_at: CrashAt, table: Table
) -> None:
    writer = crash_at("committed")
    assert writer.marker == "committed 1"

    committed = sorted(_relative(table, os.path.join(writer.staging_dir, f"part-{i}.parquet")) for i in range(3))
    assert table.version == 1
    assert sorted(table.snapshot().files_by_path) == committed
    assert table.find_commit(writer.txn_id) == 1
    report = table.cleanup(grace_seconds=0)
    # only the stray attempt file the job never added goes; every committed file stays
    assert report.deleted == (_relative(table, os.path.join(writer.staging_dir, "attempt-0.parquet")),)
    assert [p for p in committed if not os.path.isfile(os.path.join(table.location, p))] == []
    info, path = _commit_one(table)
    assert info.version == 2
    assert sorted(table.snapshot().files_by_path) == sorted([*committed, path])


def test_cleanup_keeps_the_staging_dir_of_a_running_transaction(table: Table) -> None:
    tx = table.begin("insert_into")
    f = write_part(tx.staging_dir, "part-0.parquet", {"dt": "a"})

    report = table.cleanup(grace_seconds=0)

    assert report.deleted == ()
    assert report.kept_inflight == (tx.txn_id,)
    assert os.path.isfile(f.path)
    tx.abort()


# --- 2. etcd killed and restarted while a writer commits -------------------------------------------


@dataclass
class LoopingWriter:
    """Commits one file after another in a thread until stopped, keeping every answer it got."""

    table: Table
    committed: list[tuple[CommitInfo, str]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        i = 0
        while not self.stop.is_set():
            try:
                self.committed.append(_commit_one(self.table, f"part-{i}.parquet"))
            except Exception as exc:  # with etcd back within the unavailable timeout, none is expected
                self.errors.append(f"{type(exc).__name__}: {exc}")
            i += 1


def _ensure_running(server: EmbeddedEtcd) -> None:
    if not server.is_running():
        server.restart()
    client = etcd_client(server.host, server.client_port)
    try:
        client.status()  # raises unless etcd answers
    finally:
        client.close()


def test_etcd_killed_and_restarted_mid_run_loses_no_committed_version(
    etcd_server: EmbeddedEtcd, spec: CatalogSpec, table: Table, reader: Catalog
) -> None:
    writing = spec.open(request_timeout_seconds=2, unavailable_timeout_seconds=30)
    writer = LoopingWriter(writing.table(table.name))
    thread = threading.Thread(target=writer.run, name="looping-writer", daemon=True)
    thread.start()
    try:
        wait_for(lambda: len(writer.committed) >= 10, timeout_seconds=30, message="writer made no progress")
        etcd_server.kill()
        before_kill = len(writer.committed)
        etcd_server.restart()
        wait_for(
            lambda: len(writer.committed) >= before_kill + 10,
            timeout_seconds=60,
            message="writer made no progress after etcd came back",
        )
    finally:
        writer.stop.set()
        thread.join(timeout=60)
        _ensure_running(etcd_server)
        writing.close()
    assert not thread.is_alive()

    assert writer.errors == []
    records = committed_records(reader, table)
    assert [r.version for r in records] == list(range(len(writer.committed) + 1))
    by_version = {r.version: r.txn_id for r in records}
    assert [(i.version, by_version.get(i.version)) for i, _ in writer.committed] == [
        (i.version, i.txn_id) for i, _ in writer.committed
    ]
    snapshot = reader.table(table.name).snapshot()
    assert set(snapshot.files_by_path) == {path for _, path in writer.committed}


# --- 3. etcd unreachable ----------------------------------------------------------------------------

UNAVAILABLE_TIMEOUT_SECONDS = 1.5


def _unreachable_catalog(
    tmp_path: Path, endpoint: str, prefix: str = "/acidtables-test/unreachable", timer: SkippingTimer | None = None
) -> Catalog:
    etcd = EtcdSettings((endpoint,), prefix=prefix, unavailable_timeout_seconds=UNAVAILABLE_TIMEOUT_SECONDS)
    settings = Settings(etcd=etcd, warehouse=str(tmp_path / "warehouse"))
    if timer is None:
        return Catalog(settings)
    return Catalog(settings, services=Services(settings, Coordinator(etcd, timer=timer), timer=timer))


@pytest.mark.parametrize("call", ["create_table", "table", "begin"])
def test_unreachable_etcd_raises_coordinator_unavailable_within_bounded_time(
    call: str, tmp_path: Path, catalog: Catalog, etcd_server: EmbeddedEtcd, etcd_prefix: str
) -> None:
    timer = SkippingTimer()
    if call == "begin":
        # a table handle taken while etcd answered, then etcd's port closes under it
        existing = catalog.create_table("ns.gone", schema=SCHEMA)
        with HoldingProxy(etcd_server.host, etcd_server.client_port) as proxy:
            endpoint = proxy.endpoint
            unreachable = _unreachable_catalog(tmp_path, endpoint, etcd_prefix, timer)
            handle = unreachable.table(existing.name)
    else:
        endpoint = f"http://127.0.0.1:{free_port()}"
        unreachable = _unreachable_catalog(tmp_path, endpoint, timer=timer)
    actions: dict[str, Callable[[], object]] = {
        "create_table": lambda: unreachable.create_table("ns.t", schema=SCHEMA),
        "table": lambda: unreachable.table("ns.t"),
        "begin": lambda: handle.begin("insert_into"),
    }
    try:
        with pytest.raises(CoordinatorUnavailable) as excinfo:
            actions[call]()
    finally:
        unreachable.close()

    # bounded: the loop gives up at its deadline and never pauses past it (each request has its own)
    assert timer.paused <= UNAVAILABLE_TIMEOUT_SECONDS
    assert endpoint in str(excinfo.value)
    assert "ACIDTABLES_ETCD_UNAVAILABLE_TIMEOUT_SECONDS" in str(excinfo.value)


def test_unreachable_etcd_is_retried_for_the_whole_unavailable_timeout(tmp_path: Path) -> None:
    timer = SkippingTimer()
    unreachable = _unreachable_catalog(tmp_path, f"http://127.0.0.1:{free_port()}", timer=timer)
    try:
        with pytest.raises(CoordinatorUnavailable):
            unreachable.table("ns.t")
    finally:
        unreachable.close()

    # an etcd that comes back within the configured time must be waited for, as the message promises:
    # refused connections fail at once, so nearly all of the timeout is pauses, doubling from 50 ms
    assert timer.pauses[:3] == pytest.approx([0.05, 0.1, 0.2])
    assert timer.paused == pytest.approx(UNAVAILABLE_TIMEOUT_SECONDS, abs=0.25)


# --- 4. the commit's answer is lost ----------------------------------------------------------------


@pytest.fixture
def proxy(etcd_server: EmbeddedEtcd) -> Iterator[HoldingProxy]:
    with HoldingProxy(etcd_server.host, etcd_server.client_port) as running:
        yield running


def test_lost_commit_answer_is_resolved_by_txn_id_and_lands_exactly_once(
    proxy: HoldingProxy, spec: CatalogSpec, table: Table, etcd_server: EmbeddedEtcd
) -> None:
    through_proxy = CatalogSpec(proxy.endpoint, spec.prefix, spec.warehouse).open(
        request_timeout_seconds=1, unavailable_timeout_seconds=30
    )
    direct = etcd_client(etcd_server.host, etcd_server.client_port)
    outcome: dict[str, object] = {}

    def commit() -> None:
        try:
            outcome["info"] = tx.commit()
        except BaseException as exc:
            outcome["error"] = exc

    try:
        tx = through_proxy.table(table.name).begin("insert_into")
        f = write_part(tx.staging_dir, "part-0.parquet", {"dt": "a"})
        tx.add_files([f])
        proxy.arm()
        committing = threading.Thread(target=commit, name="committer", daemon=True)
        committing.start()
        wait_for(lambda: txn_version(direct, spec.prefix, table.table_id, tx.txn_id) is not None, timeout_seconds=10)
        # the client gave up on the held answer and is looking its txn id up on a new connection
        wait_for(lambda: proxy.accepted >= 2, timeout_seconds=10)
        proxy.disarm()
        committing.join(timeout=30)
        assert not committing.is_alive()
    finally:
        proxy.disarm()
        through_proxy.close()

    try:
        assert "error" not in outcome, outcome.get("error")
        info = outcome["info"]
        assert isinstance(info, CommitInfo)
        assert (info.version, info.txn_id) == (1, tx.txn_id)
        assert table.find_commit(tx.txn_id) == 1
        assert log_versions(direct, spec.prefix, table.table_id) == [0, 1]
        assert head_version(direct, spec.prefix, table.table_id) == 1
        assert inflight_txns(direct, spec.prefix, table.table_id) == []
    finally:
        direct.close()
    assert list(table.snapshot().files_by_path) == [_relative(table, f.path)]
    assert os.path.isfile(f.path)


def test_commit_with_etcd_unreachable_after_sending_raises_outcome_unknown_and_keeps_staged_files(
    proxy: HoldingProxy, spec: CatalogSpec, table: Table
) -> None:
    through_proxy = CatalogSpec(proxy.endpoint, spec.prefix, spec.warehouse).open(
        request_timeout_seconds=1, unavailable_timeout_seconds=2
    )
    try:
        proxied_table = through_proxy.table(table.name)
        tx = proxied_table.begin("insert_into")
        f = write_part(tx.staging_dir, "part-0.parquet", {"dt": "a"})
        tx.add_files([f])
        proxy.arm()
        with pytest.raises(CommitOutcomeUnknown) as excinfo:
            tx.commit()
        assert excinfo.value.txn_id == tx.txn_id
        assert f"find_commit({tx.txn_id!r})" in str(excinfo.value)
        assert os.path.isfile(f.path)

        proxy.disarm()

        # the request did reach etcd, so once the network heals the lookup finds it committed
        assert proxied_table.find_commit(tx.txn_id) == 1
    finally:
        proxy.disarm()
        through_proxy.close()
    assert list(table.snapshot().files_by_path) == [_relative(table, f.path)]


# --- 5. TLS and user/password ----------------------------------------------------------------------

USER, PASSWORD = "root", "rootpw"


@pytest.fixture(scope="module")
def tls_etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[EmbeddedEtcd, Path]]:
    directory = tmp_path_factory.mktemp("tls-etcd")
    tls = make_tls_files(directory / "certs")
    with EmbeddedEtcd(directory / "etcd", tls=tls) as server:
        yield server, tls.ca_file


@pytest.fixture(scope="module")
def auth_etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedEtcd]:
    directory = tmp_path_factory.mktemp("auth-etcd")
    with EmbeddedEtcd(directory / "etcd") as server:
        enable_auth(server, USER, PASSWORD)
        yield server


def _secured_catalog(endpoint: str, prefix: str, warehouse: Path, **etcd: str) -> Catalog:
    settings = EtcdSettings((endpoint,), prefix=prefix, unavailable_timeout_seconds=3, **etcd)  # type: ignore[arg-type]
    return Catalog(Settings(etcd=settings, warehouse=str(warehouse)))


def _commit_and_read_back(endpoint: str, prefix: str, warehouse: Path, **etcd: str) -> None:
    """Commit through one catalog, read the file back through another."""
    with (
        _secured_catalog(endpoint, prefix, warehouse, **etcd) as writing,
        _secured_catalog(endpoint, prefix, warehouse, **etcd) as reading,
    ):
        table = writing.create_table("ns.secure", schema=SCHEMA, partition_by=["dt"])
        info, path = _commit_one(table)
        assert info.version == 1
        assert list(reading.table("ns.secure").snapshot().files_by_path) == [path]


def test_catalog_over_tls_commits_and_reads(
    tls_etcd: tuple[EmbeddedEtcd, Path], etcd_prefix: str, tmp_path: Path
) -> None:
    server, ca_file = tls_etcd
    assert server.endpoint.startswith("https://")

    _commit_and_read_back(server.endpoint, etcd_prefix, tmp_path, ca_file=str(ca_file))


def test_catalog_with_user_and_password_over_tls_commits_and_reads(etcd_prefix: str, tmp_path: Path) -> None:
    tls = make_tls_files(tmp_path / "certs")
    with EmbeddedEtcd(tmp_path / "etcd", tls=tls) as server:
        enable_auth(server, USER, PASSWORD, ca_file=tls.ca_file)

        _commit_and_read_back(
            server.endpoint, etcd_prefix, tmp_path, ca_file=str(tls.ca_file), user=USER, password=PASSWORD
        )


def test_catalog_with_user_and_password_over_plain_http_commits_and_reads(
    auth_etcd: EmbeddedEtcd, etcd_prefix: str, tmp_path: Path
) -> None:
    # in a process of its own: a catalog that spins on the auth error is killed at the deadline
    command = [sys.executable, "-m", "helpers.round_trip", auth_etcd.endpoint, etcd_prefix, str(tmp_path), USER]
    try:
        done = subprocess.run(
            [*command, PASSWORD], env=_with_helpers_on_path(), capture_output=True, text=True, timeout=15
        )
    except subprocess.TimeoutExpired:
        pytest.fail("a catalog with user/password over http did not commit within 15 s (it kept retrying)")

    assert (done.returncode, done.stdout) == (0, "committed 1 1\n"), done.stderr[-2000:]


def test_wrong_etcd_password_is_a_configuration_error_naming_the_setting(
    auth_etcd: EmbeddedEtcd, etcd_prefix: str, tmp_path: Path
) -> None:
    with (
        _secured_catalog(auth_etcd.endpoint, etcd_prefix, tmp_path, user=USER, password="wrong") as catalog,
        pytest.raises(ConfigurationError, match="ACIDTABLES_ETCD_USER"),
    ):
        catalog.create_table("ns.t", schema=SCHEMA)


def test_missing_etcd_credentials_on_an_auth_enabled_etcd_is_a_configuration_error(
    auth_etcd: EmbeddedEtcd, etcd_prefix: str, tmp_path: Path
) -> None:
    with (
        _secured_catalog(auth_etcd.endpoint, etcd_prefix, tmp_path) as catalog,
        pytest.raises(ConfigurationError, match="ACIDTABLES_ETCD_USER"),
    ):
        catalog.create_table("ns.t", schema=SCHEMA)


# --- 6. the end of a transaction -------------------------------------------------------------------


def test_abort_deletes_staged_files_and_the_inflight_registration(
    table: Table, spec: CatalogSpec, etcd_server: EmbeddedEtcd
) -> None:
    """A transaction running longer than register_after_seconds is registered; abort removes it."""
    tx = table.begin("insert_into")
    f = write_part(tx.staging_dir, "part-0.parquet", {"dt": "a"})
    tx.add_files([f])
    client = etcd_client(etcd_server.host, etcd_server.client_port)
    try:
        # still running after register_after_seconds (1 s): the registrar registered it
        wait_for(
            lambda: inflight_txns(client, spec.prefix, table.table_id) == [tx.txn_id],
            timeout_seconds=10,
            message="the running transaction registered in flight",
        )

        tx.abort()

        assert inflight_txns(client, spec.prefix, table.table_id) == []
        assert txn_version(client, spec.prefix, table.table_id, tx.txn_id) is None
    finally:
        client.close()
    assert not os.path.exists(f.path)
    assert not os.path.exists(tx.staging_dir)
    assert table.version == 0


def test_aborting_a_resumed_transaction_deletes_its_files_only_when_it_did_not_land(
    proxy: HoldingProxy, spec: CatalogSpec, catalog: Catalog, table: Table
) -> None:
    """A transaction begun in one process may be committed by a handle of it in another (Table.resume,
    as Spark's workers do), and abort() may come after that commit landed (Spark aborts a write whose
    commit raised, and a lost answer may have landed): the landed files are the table's and stay; a
    transaction that did not land loses its staged files; when etcd cannot say, they stay for cleanup."""
    other = catalog.create_table("ns.other", schema=SCHEMA, partition_by=["dt"])
    _, other_file = _commit_one(other)
    landed, did_not, unknown = (table.begin("insert_into") for _ in range(3))
    files = {tx.txn_id: write_part(tx.staging_dir, "part-0.parquet", {"dt": "a"}) for tx in (landed, did_not, unknown)}
    for tx in (landed, did_not, unknown):
        tx.add_files([files[tx.txn_id]])
    landed.commit()

    table.resume(landed.txn_id, "insert_into", read_version=0, head_revision=0).abort()
    table.resume(did_not.txn_id, "insert_into", read_version=0, head_revision=0).abort()

    assert os.path.isfile(files[landed.txn_id].path)
    assert list(table.snapshot().files_by_path) == [_relative(table, files[landed.txn_id].path)]
    assert not os.path.exists(did_not.staging_dir)

    through_proxy = CatalogSpec(proxy.endpoint, spec.prefix, spec.warehouse).open(
        request_timeout_seconds=1, unavailable_timeout_seconds=2
    )
    try:
        resumed = through_proxy.table(table.name).resume(unknown.txn_id, "insert_into", read_version=0, head_revision=0)
        proxy.arm()  # etcd's answers stop coming: whether it landed cannot be known
        resumed.abort()
    finally:
        proxy.disarm()
        through_proxy.close()
    assert os.path.isfile(files[unknown.txn_id].path)  # cleanup, which reads the log, removes them later
    assert table.version == 1
    assert os.path.isfile(other.storage.absolute(other_file)) and other.version == 1  # another table's files


@pytest.mark.parametrize("method", ["commit", "add_files", "remove_files", "scan", "record_read"])
def test_transaction_used_after_commit_raises_transaction_closed(method: str, table: Table) -> None:
    tx = table.begin("insert_into")
    f = write_part(tx.staging_dir, "part-0.parquet", {"dt": "a"})
    tx.add_files([f])
    tx.commit()
    calls: dict[str, Callable[[], object]] = {
        "commit": lambda: tx.commit(),
        "add_files": lambda: tx.add_files([write_part(tx.staging_dir, "part-1.parquet", {"dt": "a"})]),
        "remove_files": lambda: tx.remove_files([f.path]),
        "scan": lambda: tx.scan("dt = 'a'"),
        "record_read": lambda: tx.record_read(predicate="dt = 'a'"),
    }

    with pytest.raises(TransactionClosedError, match=f"{method}\\(\\).*already committed"):
        calls[method]()

    assert table.version == 1


# --- TLS misconfiguration is named, not waited out ------------------------------------------------------


def _tls_catalog(
    endpoint: str,
    etcd_prefix: str,
    tmp_path: Path,
    ca_file: str | None,
    unavailable_seconds: float = 3.0,
    timer: SkippingTimer | None = None,
) -> Catalog:
    etcd = EtcdSettings(
        (endpoint,), prefix=etcd_prefix, ca_file=ca_file, unavailable_timeout_seconds=unavailable_seconds
    )
    settings = Settings(etcd=etcd, warehouse=str(tmp_path / "warehouse"))
    if timer is None:
        return Catalog(settings)
    return Catalog(settings, services=Services(settings, Coordinator(etcd, timer=timer), timer=timer))


def test_https_against_a_plaintext_etcd_names_the_endpoint_and_the_tls_cause(
    etcd_server: EmbeddedEtcd, tls_etcd: tuple[EmbeddedEtcd, Path], etcd_prefix: str, tmp_path: Path
) -> None:
    _, ca_file = tls_etcd
    endpoint = etcd_server.endpoint.replace("http://", "https://")
    timer = SkippingTimer()
    with (
        _tls_catalog(endpoint, etcd_prefix, tmp_path, str(ca_file), unavailable_seconds=20.0, timer=timer) as catalog,
        pytest.raises(ConfigurationError, match="TLS with etcd at") as caught,
    ):
        catalog.list_tables()
    assert endpoint in str(caught.value) and "is etcd serving TLS" in str(caught.value)
    assert timer.paused < 1  # told at once, not after the 20 s unavailable deadline


def test_plain_http_against_a_tls_etcd_names_the_endpoint(
    tls_etcd: tuple[EmbeddedEtcd, Path], etcd_prefix: str, tmp_path: Path
) -> None:
    server, _ = tls_etcd
    endpoint = server.endpoint.replace("https://", "http://")
    with (
        _tls_catalog(endpoint, etcd_prefix, tmp_path, None) as catalog,
        pytest.raises((ConfigurationError, CoordinatorUnavailable)) as caught,
    ):
        catalog.list_tables()
    assert endpoint in str(caught.value)


def test_a_server_certificate_the_ca_did_not_sign_is_named_with_python_s_reason_and_the_variable(
    tls_etcd: tuple[EmbeddedEtcd, Path], etcd_prefix: str, tmp_path: Path
) -> None:
    """gRPC says only CERTIFICATE_VERIFY_FAILED; the error carries the check that failed, and which
    variable named the CA it was checked against, at once."""
    server, _ = tls_etcd
    other_ca = make_tls_files(tmp_path / "other-ca").ca_file
    timer = SkippingTimer()
    with (
        _tls_catalog(
            server.endpoint, etcd_prefix, tmp_path, str(other_ca), unavailable_seconds=20.0, timer=timer
        ) as catalog,
        pytest.raises(ConfigurationError, match="TLS with etcd at") as caught,
    ):
        catalog.list_tables()
    message = str(caught.value)
    refused = f"the certificate {server.endpoint} presents is refused against ACIDTABLES_ETCD_CA_FILE={other_ca}"
    assert refused in message
    assert "unable to get local issuer certificate" in message
    assert timer.paused < 1


@pytest.mark.parametrize("problem", ["missing", "a directory"])
def test_an_unreadable_ca_file_is_named_with_its_variable(
    tls_etcd: tuple[EmbeddedEtcd, Path], etcd_prefix: str, tmp_path: Path, problem: str
) -> None:
    server, _ = tls_etcd
    ca_file = tmp_path / "nope.pem" if problem == "missing" else tmp_path
    with (
        _tls_catalog(server.endpoint, etcd_prefix, tmp_path, str(ca_file)) as catalog,
        pytest.raises(ConfigurationError, match=f"ACIDTABLES_ETCD_CA_FILE={ca_file} cannot be read") as caught,
    ):
        catalog.list_tables()
    assert server.endpoint in str(caught.value)


def test_a_quick_commit_never_registers_and_costs_one_compare_and_swap(table: Table, spec: CatalogSpec) -> None:
    """The commit path of a quick append (design §2): no registration, no head read, one round trip.
    "Quick" is against register_after_seconds, set long here so a slow machine cannot blur it."""
    with spec.open(commit=CommitSettings(register_after_seconds=60)) as catalog:
        quick = catalog.table(table.name)
        coordinator = catalog.services.coordinator
        calls: list[str] = []
        watched = ("register_inflight", "read_head", "compare_and_swap")
        originals = {name: getattr(coordinator, name) for name in watched}
        for name, original in originals.items():

            def counted(*args: object, _name: str = name, _original: object = original, **kwargs: object) -> object:
                calls.append(_name)
                return _original(*args, **kwargs)  # type: ignore[operator]

            setattr(coordinator, name, counted)  # the real coordinator, its calls counted
        _commit_one(quick)  # the first: the process learns the head
        calls.clear()
        info, _ = _commit_one(quick)
    assert info.version == 2 and calls == ["compare_and_swap"]
