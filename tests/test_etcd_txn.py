"""The commit's etcd transaction built from prepared parts (issue 17) is the same request pyetcd would
build, and it still fails over between etcd members as every other request does."""

from __future__ import annotations

import random
from typing import Any

import pyetcd
import pytest
from pyetcd import transactions as ops
from tests.helpers.tables import staged_parquet

from acidtables import Catalog, Table, Transaction
from acidtables.core.coordination.connection import MEMBER_RETRY_SECONDS
from acidtables.core.coordination.embedded import EmbeddedEtcd, free_port
from acidtables.core.coordination.etcd_txn import CommitRequests, build_many, send
from acidtables.core.coordination.tables import Tables

PREFIX = "/p/tables/0123abcd/"


def _requests(table_prefix: str) -> CommitRequests:
    """The parts as the coordinator prepares them for a table under `table_prefix`."""
    return CommitRequests(
        head=table_prefix + "head",
        log=table_prefix + "log/",
        txns=table_prefix + "txns/",
        inflight=table_prefix + "inflight/",
        times=table_prefix + "times/",
    )


def _through_pyetcd(time_version: int | None) -> bytes:
    """The request as the commit built it before, through pyetcd's op objects."""
    client = pyetcd.MultiEndpointEtcd3Client(endpoints=[pyetcd.Endpoint("127.0.0.1", 1, secure=False)])
    puts = [
        ops.Put(PREFIX + "log/00000000000000000042", b"entry"),
        ops.Put(PREFIX + "head", b'{"version": 42}'),
        ops.Put(PREFIX + "txns/feedface", b"42"),
        ops.Delete(PREFIX + "inflight/feedface"),
    ]
    if time_version is not None:
        puts.append(ops.Put(PREFIX + f"times/{time_version:020d}", b"42"))
    failure = [
        ops.Get(PREFIX + "head"),
        ops.Get(PREFIX + "log/00000000000000000040", range_end=PREFIX + "log/00000000000000000052"),
    ]
    request = pyetcd.etcdrpc.TxnRequest(
        compare=[(client.transactions.mod(PREFIX + "head") == 777).build_message()],
        success=client._ops_to_requests(puts),
        failure=client._ops_to_requests(failure),
    )
    return bytes(request.SerializeToString())


def test_the_prepared_request_is_byte_for_byte_the_one_pyetcd_builds() -> None:
    prepared = _requests(PREFIX)
    for time_version in (None, 1764000000123456):
        built = build_many(
            [
                prepared.parts(
                    expected_head_revision=777,
                    read_after=39,
                    window=12,
                    version=42,
                    entry=b"entry",
                    head=b'{"version": 42}',
                    txn_id="feedface",
                    time_version=time_version,
                )
            ]
        )
        assert built.SerializeToString() == _through_pyetcd(time_version)


def test_the_commit_request_marks_a_dead_member_failed_and_the_next_one_uses_a_live_member(
    etcd_server: EmbeddedEtcd, etcd_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What pyetcd does for its own requests, the commit's send does too: without it a client whose
    first member died would send every commit to that member until the client was replaced."""
    monkeypatch.setattr(random, "choice", lambda members: members[0])  # pyetcd starts on a random member
    client = pyetcd.MultiEndpointEtcd3Client(
        endpoints=[
            # nothing listens on the first; the core's clients skip a failed member this long (etcd.py)
            pyetcd.Endpoint("127.0.0.1", free_port(), secure=False, time_retry=MEMBER_RETRY_SECONDS),
            pyetcd.Endpoint(etcd_server.host, etcd_server.client_port, secure=False, time_retry=MEMBER_RETRY_SECONDS),
        ],
        timeout=5,
        failover=True,
    )
    request = build_many(
        [
            _requests(f"{etcd_prefix}/tables/t/").parts(
                expected_head_revision=0,  # the head does not exist yet: its mod revision compares as 0
                read_after=0,
                window=12,
                version=1,
                entry=b"{}",
                head=b'{"version": 1}',
                txn_id="feedface",
                time_version=None,
            )
        ]
    )
    try:
        with pytest.raises(pyetcd.exceptions.ConnectionFailedError):
            send(client, request)
        answer = send(client, request)
        assert answer.succeeded
        value, _ = client.get(f"{etcd_prefix}/tables/t/txns/feedface")
        assert value == b"1"
    finally:
        client.close()


# --- the in-flight delete: only when a registration may exist ------------------------------------------


def _commit_requests_of(catalog: Catalog, monkeypatch: pytest.MonkeyPatch, during: Any = None) -> list[Any]:
    """Every commit transaction the catalog sends from now on; `during` runs just before each goes out
    (what another thread of the process, the registrar, may do at that moment)."""
    sent: list[Any] = []
    send_commit = Tables._send_commit

    def spy(self: Tables, client: Any, request: Any) -> Any:
        sent.append(request)
        if during is not None:
            during()
        return send_commit(self, client, request)

    monkeypatch.setattr(Tables, "_send_commit", spy)
    return sent


def _deletes(request: Any) -> list[bytes]:
    return [op.request_delete_range.key for op in request.success if op.WhichOneof("request") == "request_delete_range"]


def _one_file_insert(catalog: Catalog, name: str) -> tuple[Table, Transaction]:
    table = catalog.create_table(name, schema="id BIGINT, dt STRING", partition_by=["dt"])
    tx = table.begin("insert_into")
    tx.add_files([staged_parquet(tx, {"dt": "a"})])
    return table, tx


def test_a_transaction_never_registered_spares_etcd_the_in_flight_delete_and_is_never_registered_after(
    catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    table, tx = _one_file_insert(catalog, "s.short")
    # the registrar's turn comes while the commit is on its way: it must not register the transaction,
    # since the commit transaction no longer deletes a registration
    sent = _commit_requests_of(catalog, monkeypatch, during=tx.register_in_flight)
    tx.commit()
    assert [_deletes(r) for r in sent] == [[]]
    assert [op.WhichOneof("request") for op in sent[0].success] == ["request_put"] * 4
    assert table.in_flight() == [] and table.version == 1


def test_a_registered_transaction_has_its_registration_deleted_by_its_commit(
    catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    table, tx = _one_file_insert(catalog, "s.long")
    tx.register_in_flight()
    assert [r.txn_id for r in table.in_flight()] == [tx.txn_id]
    sent = _commit_requests_of(catalog, monkeypatch)
    tx.commit()
    assert [len(_deletes(r)) for r in sent] == [1]
    assert _deletes(sent[0])[0].decode().endswith(f"/inflight/{tx.txn_id}")
    assert table.in_flight() == []


def test_a_transaction_resumed_from_another_process_deletes_the_registration_made_there(
    catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = catalog.create_table("s.resumed", schema="id BIGINT, dt STRING", partition_by=["dt"])
    begun = table.begin("insert_into")  # as a Spark driver does; its executor commits
    begun.register_in_flight()
    resumed = table.resume(
        begun.txn_id, "insert_into", read_version=begun.read_version, head_revision=begun.head_revision
    )
    resumed.add_files([staged_parquet(resumed, {"dt": "a"})])
    sent = _commit_requests_of(catalog, monkeypatch)
    resumed.commit()
    assert [len(_deletes(r)) for r in sent] == [1]
    assert table.in_flight() == [] and table.version == 1
