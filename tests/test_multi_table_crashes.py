"""A multi-table writer killed with SIGKILL at every step of its transaction (issue 44).

A separate writer process (tests/helpers/crash_multi_writer.py) runs one `catalog.transaction()` over two
or three tables and blocks on stdin at the chosen point; the test kills it there: while it stages the
first table's files, with every part staged, with the commit request held in the network before etcd,
with etcd's answer held after etcd applied it, and after commit() returned. Once the writer is dead and
its lease expired, a fresh Catalog must find every table moved by one version to a record of the same
multi-table transaction, or every table unmoved: never one without the other. `cleanup(grace_seconds=0)`
then deletes the dead writer's staged files and keeps the committed ones.

The network faults come from TCP proxies between the writer and etcd. `HoldingProxy.arm()` forwards
requests and holds the replies, so etcd applies the commit and the writer never hears of it; it cannot
hold a request back, so `RequestHoldingProxy` (below) adds that: the commit request leaves the writer
and is dropped with the connection when the writer dies, so etcd never sees it.

Last, idempotent reruns: a job whose parts carry the application id ("job-x", 7), run again after its
commit landed unheard (killed awaiting the answer, killed after commit, or CommitOutcomeUnknown), commits
nothing new: every part is skipped and no version moves. Rerun after a request that never reached etcd,
it commits once.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from tests.helpers.crash_multi_writer import ADDED_FILES, LEASE_TTL_SECONDS, STRAY_FILE
from tests.helpers.processes import LineReader, kill_and_reap
from tests.helpers.tables import CatalogSpec, etcd_client, inflight_txns, staged_parquet, txn_version, write_part

from acidtables import Catalog, Table
from acidtables.check.proxy import HoldingProxy
from acidtables.core.commit.txn_ids import lease_of
from acidtables.core.coordination.embedded import EmbeddedEtcd
from acidtables.core.coordination.waiting import wait_for
from acidtables.errors import CommitOutcomeUnknown

TESTS_DIR = Path(__file__).resolve().parent
SCHEMA = "id BIGINT, dt STRING"
TABLE_NAMES = ("shop.orders", "shop.payments", "shop.audit")
APP = ("job-x", 7)
#: every line the writer prints at a crash point (or at its end) starts with one of these
MARKERS = ("staging", "staged", "committing", "committed", "finished")


# --- a proxy that can also hold requests -----------------------------------------------------------


class RequestHoldingProxy(HoldingProxy):
    """HoldingProxy that can also keep what clients send: after `hold_requests()` nothing more reaches
    etcd, and what was held is thrown away with its connection (its client killed, or the proxy closed).
    Replies pass as usual. `HoldingProxy.arm()` is the opposite fault (requests pass, replies held)."""

    def __init__(self, target_host: str, target_port: int) -> None:
        super().__init__(target_host, target_port)
        self._requests_held = threading.Event()
        self._held_requests_lock = threading.Lock()
        self._held_requests = bytearray()

    def __enter__(self) -> RequestHoldingProxy:
        self.start()
        return self

    def hold_requests(self) -> None:
        self._requests_held.set()

    def held_requests(self) -> bytes:
        """Every byte clients sent since `hold_requests()`, none of which reached etcd."""
        with self._held_requests_lock:
            return bytes(self._held_requests)

    def _pump(self, connection: Any) -> None:
        client, server = connection.client, connection.server
        try:
            while not connection.closed.is_set():
                ready, _, _ = _select([client, server])
                for sock in ready:
                    data = sock.recv(65536)
                    if not data:
                        return  # one side hung up: hang up the other, dropping what was held
                    if sock is not client:
                        client.sendall(data)
                    elif self._requests_held.is_set():
                        with self._held_requests_lock:
                            self._held_requests += data
                    else:
                        server.sendall(data)
        except (OSError, ValueError):
            return
        finally:
            with self._lock:
                if connection in self._connections:
                    self._connections.remove(connection)
            if not connection.closed.is_set():
                connection.close()


def _select(socks: list[Any]) -> tuple[list[Any], list[Any], list[Any]]:
    return select.select(socks, [], [], 0.05)


# --- the writer process ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Part:
    table: str
    txn_id: str
    staging_dir: str


@dataclass
class Writer:
    process: subprocess.Popen[bytes]
    lines: LineReader
    log: Path
    multi_txn_id: str = ""
    parts: dict[str, Part] = field(default_factory=dict)

    def next_marker(self, timeout_seconds: float = 30) -> str:
        """Read lines up to the next crash point's marker, noting the transaction and its parts."""
        while True:
            try:
                line = self.lines.next_line(timeout_seconds=timeout_seconds)
            except (TimeoutError, EOFError) as exc:
                raise AssertionError(f"{exc}; writer stderr:\n{self.log.read_text()}") from exc
            word, _, rest = line.partition(" ")
            if word == "multi":
                self.multi_txn_id = rest
            elif word == "began":
                table, txn_id, staging_dir = rest.split(" ")
                self.parts[table] = Part(table, txn_id, staging_dir)
            elif word in MARKERS:
                return line
            else:
                raise AssertionError(f"unexpected line from the writer: {line!r}")

    def go_on(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(b"\n")
        self.process.stdin.flush()

    def kill(self) -> None:
        kill_and_reap(self.process)

    def killed_before_printing_more(self) -> bool:
        """SIGKILL it; then True when it died without printing another line (its stdout ends there)."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=10)
        try:
            self.lines.next_line(timeout_seconds=5)
        except EOFError:
            return True
        finally:
            kill_and_reap(self.process)
        return False


StartWriter = Callable[..., Writer]


@pytest.fixture
def spec(etcd_server: EmbeddedEtcd, etcd_prefix: str, tmp_path: Path) -> CatalogSpec:
    """The `catalog` fixture's etcd, prefix and warehouse, for other processes and fresh catalogs."""
    return CatalogSpec(etcd_server.endpoint, etcd_prefix, str(tmp_path / "warehouse"))


@pytest.fixture
def start_writer(spec: CatalogSpec, tmp_path: Path) -> Iterator[StartWriter]:
    """Start a crash_multi_writer and read up to its first marker; every one is killed at teardown."""
    writers: list[Writer] = []
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS_DIR), os.environ.get("PYTHONPATH", "")])}

    def start(point: str, tables: list[str], *, endpoint: str | None = None, app: bool = False) -> Writer:
        log = tmp_path / f"writer-{point}-{len(writers)}.log"
        command = [sys.executable, "-m", "helpers.crash_multi_writer", endpoint or spec.endpoint, spec.prefix]
        command += [spec.warehouse, point, *tables]
        if app:
            command += ["--app", f"{APP[0]}:{APP[1]}"]
        with log.open("wb") as stderr:
            process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, env=env)
        writer = Writer(process, LineReader(process), log)
        writers.append(writer)
        return writer

    yield start
    for writer in writers:
        writer.kill()


@pytest.fixture(params=[2, 3], ids=["two-tables", "three-tables"])
def tables(request: pytest.FixtureRequest, catalog: Catalog) -> list[str]:
    """Two or three tables, each with one commit of its own before the writer runs (version 1)."""
    names = list(TABLE_NAMES[: request.param])
    for name in names:
        table = catalog.create_table(name, schema=SCHEMA, partition_by=["dt"])
        with table.begin("insert_into") as tx:
            tx.add_files([staged_parquet(tx, {"dt": "seed"})])
            tx.commit()
    return names


@pytest.fixture
def two_tables(catalog: Catalog) -> list[str]:
    names = list(TABLE_NAMES[:2])
    for name in names:
        catalog.create_table(name, schema=SCHEMA, partition_by=["dt"])
    return names


def _versions(catalog: Catalog, names: list[str]) -> dict[str, int]:
    return {name: catalog.table(name).version for name in names}


def _relative(table: Table, path: str) -> str:
    return os.path.relpath(path, table.location)


def _wait_until_dead(spec: CatalogSpec, etcd_server: EmbeddedEtcd, catalog: Catalog, writer: Writer) -> None:
    """Until etcd sees the killed writer dead: its lease expired and no part registered as in flight."""
    client = etcd_client(etcd_server.host, etcd_server.client_port)
    leases = {lease_of(part.txn_id) for part in writer.parts.values()}
    assert None not in leases
    table_ids = {part.txn_id: catalog.table(part.table).table_id for part in writer.parts.values()}

    def dead() -> bool:
        if any(client.get_lease_info(lease).TTL > 0 for lease in leases):
            return False
        return all(txn not in inflight_txns(client, spec.prefix, tid) for txn, tid in table_ids.items())

    try:
        wait_for(
            dead,
            timeout_seconds=LEASE_TTL_SECONDS + 10,
            message=f"the writer's lease still alive {LEASE_TTL_SECONDS + 10} s after it died",
        )
    finally:
        client.close()


def _landed(fresh: Catalog, writer: Writer, names: list[str]) -> str:
    """ "all" or "none" of the writer's parts committed, judged by a fresh catalog; any mix fails."""
    found = {name: fresh.table(name).find_commit(part.txn_id) for name, part in writer.parts.items()}
    assert len({version is None for version in found.values()}) <= 1, f"a multi-table commit in part: {found}"
    if not found or None in found.values():
        return "none"
    assert set(found) == set(names), f"parts committed on {sorted(found)} only, of {names}"
    return "all"


def assert_none_landed(fresh: Catalog, writer: Writer, names: list[str], before: dict[str, int]) -> None:
    assert _landed(fresh, writer, names) == "none"
    assert _versions(fresh, names) == before
    for name in names:
        table = fresh.table(name)
        (newest,) = table.commits(table.version, table.version)
        assert newest.multi_txn_id is None
        assert sorted(table.snapshot().files_by_path) == _files_at(table, before[name])


def assert_all_landed(fresh: Catalog, writer: Writer, names: list[str], before: dict[str, int]) -> None:
    assert _landed(fresh, writer, names) == "all"
    assert _versions(fresh, names) == {name: version + 1 for name, version in before.items()}
    for name in names:
        table = fresh.table(name)
        part = writer.parts[name]
        (newest,) = table.commits(table.version, table.version)
        assert (newest.txn_id, newest.multi_txn_id) == (part.txn_id, writer.multi_txn_id)
        assert sorted(newest.multi_txn_tables) == sorted(names)
        assert table.find_commit(part.txn_id) == before[name] + 1
        added = [_relative(table, os.path.join(part.staging_dir, f)) for f in ADDED_FILES]
        assert sorted(table.snapshot().files_by_path) == sorted([*_files_at(table, before[name]), *added])


def _files_at(table: Table, version: int) -> list[str]:
    return sorted(table.snapshot(version=version).files_by_path)


def assert_cleanup_removes_the_staging(fresh: Catalog, writer: Writer, names: list[str]) -> None:
    """Nothing committed: every part's staging directory goes, and only those."""
    for name in names:
        table = fresh.table(name)
        part = writer.parts.get(name)
        report = table.cleanup(grace_seconds=0)
        assert report.deleted == (() if part is None else (_relative(table, part.staging_dir),))
        assert part is None or not os.path.exists(part.staging_dir)
        assert all(os.path.isfile(os.path.join(table.location, p)) for p in table.snapshot().files_by_path)


def assert_cleanup_keeps_the_commit(fresh: Catalog, writer: Writer, names: list[str]) -> None:
    """Everything committed: only each part's stray attempt goes; every committed file stays."""
    for name in names:
        table = fresh.table(name)
        part = writer.parts[name]
        report = table.cleanup(grace_seconds=0)
        assert report.deleted == (_relative(table, os.path.join(part.staging_dir, STRAY_FILE)),)
        assert all(os.path.isfile(os.path.join(table.location, p)) for p in table.snapshot().files_by_path)


def assert_tables_still_commit(fresh: Catalog, names: list[str]) -> None:
    """A new multi-table commit after the crash lands on every table."""
    before = _versions(fresh, names)
    with fresh.transaction() as tx:
        for name in names:
            part = tx.begin(name, "insert_into")
            part.add_files([staged_parquet(part, {"dt": "after"})])
    assert _versions(fresh, names) == {name: version + 1 for name, version in before.items()}


def assert_after_death(
    spec: CatalogSpec,
    etcd_server: EmbeddedEtcd,
    catalog: Catalog,
    writer: Writer,
    names: list[str],
    before: dict[str, int],
    *,
    landed: bool,
) -> None:
    """Once etcd sees the writer dead, a fresh catalog finds every part landed (`landed`) or none, cleanup
    keeps the commit's files or removes the staging, and the tables still take commits."""
    _wait_until_dead(spec, etcd_server, catalog, writer)
    with spec.open() as fresh:
        if landed:
            assert_all_landed(fresh, writer, names, before)
            assert_cleanup_keeps_the_commit(fresh, writer, names)
        else:
            assert_none_landed(fresh, writer, names, before)
            assert_cleanup_removes_the_staging(fresh, writer, names)
        assert_tables_still_commit(fresh, names)


# --- 1. killed before the commit is sent -----------------------------------------------------------


@pytest.mark.parametrize("point", ["staging", "staged"], ids=["while-staging-the-first-table", "all-parts-staged"])
def test_writer_killed_before_commit_moves_no_table_and_cleanup_removes_its_staging(
    point: str,
    tables: list[str],
    catalog: Catalog,
    spec: CatalogSpec,
    etcd_server: EmbeddedEtcd,
    start_writer: StartWriter,
) -> None:
    before = _versions(catalog, tables)
    writer = start_writer(point, tables)
    assert writer.next_marker() == point
    assert len(writer.parts) == (1 if point == "staging" else len(tables))
    for name, part in writer.parts.items():
        # while it waits there it is running: cleanup keeps its staged files
        assert part.txn_id in catalog.table(name).cleanup(grace_seconds=0).kept_inflight
        assert os.listdir(part.staging_dir) != []
    writer.kill()
    assert_after_death(spec, etcd_server, catalog, writer, tables, before, landed=False)


# --- 2. killed with the commit request sent, the answer not received ------------------------------


def test_writer_killed_with_its_commit_request_held_before_etcd_moves_no_table(
    tables: list[str], catalog: Catalog, spec: CatalogSpec, etcd_server: EmbeddedEtcd, start_writer: StartWriter
) -> None:
    before = _versions(catalog, tables)
    direct = etcd_client(etcd_server.host, etcd_server.client_port)
    with RequestHoldingProxy(etcd_server.host, etcd_server.client_port) as proxy:
        writer = start_writer("committing", tables, endpoint=proxy.endpoint)
        assert writer.next_marker() == "committing"
        proxy.hold_requests()
        writer.go_on()
        # the whole commit request (it writes every part's txns/<id> key) left the writer and sits here
        wanted = [f"/txns/{part.txn_id}".encode() for part in writer.parts.values()]
        wait_for(
            lambda: all(key in proxy.held_requests() for key in wanted),
            timeout_seconds=15,
            message="the writer's commit request never reached the proxy",
        )
        ids = {part.txn_id: catalog.table(part.table).table_id for part in writer.parts.values()}
        try:
            assert [txn for txn, tid in ids.items() if txn_version(direct, spec.prefix, tid, txn) is not None] == []
        finally:
            direct.close()
        assert writer.killed_before_printing_more()
    assert_after_death(spec, etcd_server, catalog, writer, tables, before, landed=False)


def _kill_with_the_answer_held(
    writer: Writer, proxy: HoldingProxy, spec: CatalogSpec, etcd_server: EmbeddedEtcd, catalog: Catalog
) -> None:
    """Let the writer send its commit through an armed proxy, wait until etcd applied it (read straight
    from etcd), and kill the writer before it hears the answer."""
    assert writer.next_marker() == "committing"
    proxy.arm()
    writer.go_on()
    direct = etcd_client(etcd_server.host, etcd_server.client_port)
    try:
        ids = {part.txn_id: catalog.table(part.table).table_id for part in writer.parts.values()}
        wait_for(
            lambda: all(txn_version(direct, spec.prefix, tid, txn) is not None for txn, tid in ids.items()),
            timeout_seconds=15,
            message="etcd never applied the writer's commit",
        )
    finally:
        direct.close()
    assert proxy.held_bytes > 0  # etcd's answer, kept from the writer
    assert writer.killed_before_printing_more(), "the writer heard the answer"


def test_writer_killed_with_etcd_s_answer_held_moves_every_table(
    tables: list[str], catalog: Catalog, spec: CatalogSpec, etcd_server: EmbeddedEtcd, start_writer: StartWriter
) -> None:
    before = _versions(catalog, tables)
    with HoldingProxy(etcd_server.host, etcd_server.client_port) as proxy:
        writer = start_writer("committing", tables, endpoint=proxy.endpoint)
        _kill_with_the_answer_held(writer, proxy, spec, etcd_server, catalog)
    assert_after_death(spec, etcd_server, catalog, writer, tables, before, landed=True)


# --- 3. killed after commit returned ---------------------------------------------------------------


def test_writer_killed_after_commit_returned_keeps_every_table_s_part(
    tables: list[str], catalog: Catalog, spec: CatalogSpec, etcd_server: EmbeddedEtcd, start_writer: StartWriter
) -> None:
    before = _versions(catalog, tables)
    writer = start_writer("committed", tables)
    marker, _, infos = writer.next_marker().partition(" ")
    assert marker == "committed"
    assert json.loads(infos) == {
        name: {"version": before[name] + 1, "skipped": False, "multi_txn_id": writer.multi_txn_id} for name in tables
    }
    writer.kill()
    assert_after_death(spec, etcd_server, catalog, writer, tables, before, landed=True)


# --- 4. idempotent reruns with application ids -----------------------------------------------------


def _rerun(start_writer: StartWriter, names: list[str]) -> tuple[Writer, dict[str, dict[str, Any]]]:
    """The same job again, in a new process straight to etcd, run to its end."""
    rerun = start_writer("finish", names, app=True)
    marker, _, infos = rerun.next_marker().partition(" ")
    assert marker == "finished"
    assert rerun.process.wait(timeout=30) == 0
    return rerun, json.loads(infos)


def assert_rerun_skipped(
    fresh: Catalog, rerun: Writer, infos: dict[str, dict[str, Any]], names: list[str], landed_at: dict[str, int]
) -> None:
    """Every part of the rerun skipped as already applied at the first run's version; nothing moved."""
    assert {name: (info["skipped"], info["version"]) for name, info in infos.items()} == {
        name: (True, landed_at[name]) for name in names
    }
    assert _versions(fresh, names) == landed_at
    for name in names:
        table = fresh.table(name)
        assert table.find_commit(rerun.parts[name].txn_id) is None
        assert table.snapshot().app_ids[APP[0]] == (APP[1], landed_at[name])
        # a skipped part's staged files are deleted, the stray attempt with them
        assert not os.path.exists(rerun.parts[name].staging_dir)


@pytest.mark.parametrize("point", ["answer-held", "committed"], ids=["killed-awaiting-answer", "killed-after-commit"])
def test_rerun_of_an_application_job_whose_commit_landed_commits_nothing_new(
    point: str,
    two_tables: list[str],
    catalog: Catalog,
    spec: CatalogSpec,
    etcd_server: EmbeddedEtcd,
    start_writer: StartWriter,
) -> None:
    before = _versions(catalog, two_tables)
    if point == "committed":
        writer = start_writer("committed", two_tables, app=True)
        assert writer.next_marker().startswith("committed ")
        writer.kill()
    else:
        with HoldingProxy(etcd_server.host, etcd_server.client_port) as proxy:
            writer = start_writer("committing", two_tables, endpoint=proxy.endpoint, app=True)
            _kill_with_the_answer_held(writer, proxy, spec, etcd_server, catalog)
    _wait_until_dead(spec, etcd_server, catalog, writer)
    landed_at = {name: version + 1 for name, version in before.items()}

    rerun, infos = _rerun(start_writer, two_tables)
    with spec.open() as fresh:
        assert_all_landed(fresh, writer, two_tables, before)
        assert_rerun_skipped(fresh, rerun, infos, two_tables, landed_at)


def test_rerun_of_an_application_job_after_commit_outcome_unknown_commits_nothing_new(
    two_tables: list[str], catalog: Catalog, spec: CatalogSpec, etcd_server: EmbeddedEtcd, start_writer: StartWriter
) -> None:
    before = _versions(catalog, two_tables)
    with HoldingProxy(etcd_server.host, etcd_server.client_port) as proxy:
        through_proxy = CatalogSpec(proxy.endpoint, spec.prefix, spec.warehouse).open(
            request_timeout_seconds=1, unavailable_timeout_seconds=2
        )
        try:
            tx = through_proxy.transaction()
            for name in two_tables:
                part = tx.begin(name, "insert_into")
                part.set_app_transaction(*APP)
                part.add_files([write_part(part.staging_dir, "part-0.parquet", {"dt": "a"})])
            proxy.arm()
            with pytest.raises(CommitOutcomeUnknown):
                tx.commit()
            assert tx.state == "of unknown outcome"
            proxy.disarm()
        finally:
            proxy.disarm()
            through_proxy.close()
    landed_at = {name: version + 1 for name, version in before.items()}
    with spec.open() as fresh:
        # the request reached etcd before its answer was held: every part landed
        assert {name: fresh.table(name).find_commit(p.txn_id) for name, p in tx.parts.items()} == landed_at

    rerun, infos = _rerun(start_writer, two_tables)
    with spec.open() as fresh:
        assert_rerun_skipped(fresh, rerun, infos, two_tables, landed_at)
        for name in two_tables:
            (newest,) = fresh.table(name).commits(landed_at[name], landed_at[name])
            assert newest.multi_txn_id == tx.id


def test_rerun_of_an_application_job_whose_request_never_reached_etcd_commits_it_once(
    two_tables: list[str], catalog: Catalog, spec: CatalogSpec, etcd_server: EmbeddedEtcd, start_writer: StartWriter
) -> None:
    """The control: the id skips only what landed; a job that never reached etcd is committed by its rerun."""
    before = _versions(catalog, two_tables)
    with RequestHoldingProxy(etcd_server.host, etcd_server.client_port) as proxy:
        writer = start_writer("committing", two_tables, endpoint=proxy.endpoint, app=True)
        assert writer.next_marker() == "committing"
        proxy.hold_requests()
        writer.go_on()
        wanted = [f"/txns/{part.txn_id}".encode() for part in writer.parts.values()]
        wait_for(lambda: all(key in proxy.held_requests() for key in wanted), timeout_seconds=15)
        writer.kill()
    _wait_until_dead(spec, etcd_server, catalog, writer)

    rerun, infos = _rerun(start_writer, two_tables)
    assert {name: (info["skipped"], info["version"]) for name, info in infos.items()} == {
        name: (False, version + 1) for name, version in before.items()
    }
    rerun_again, infos_again = _rerun(start_writer, two_tables)
    with spec.open() as fresh:
        assert_none_landed_for(fresh, writer, two_tables)
        assert_all_landed(fresh, rerun, two_tables, before)
        assert_rerun_skipped(fresh, rerun_again, infos_again, two_tables, {n: v + 1 for n, v in before.items()})


def assert_none_landed_for(fresh: Catalog, writer: Writer, names: list[str]) -> None:
    assert _landed(fresh, writer, names) == "none"
