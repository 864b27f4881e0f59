"""Persisted records round-trip, and every error is under the one root (style: one exception tree)."""

from __future__ import annotations

import dataclasses
import inspect
import json

import pytest

import acidtables.errors as public_errors
from acidtables.core.errors import (
    AcidTablesError,
    ConcurrentAppendException,
    ConcurrentDeleteDeleteException,
    ConcurrentDeleteReadException,
    ConcurrentModificationException,
    ConcurrentTransactionException,
    MetadataChangedException,
    ProtocolChangedException,
    TransactionConflictException,
)
from acidtables.core.expressions import parse_predicate
from acidtables.core.log.operations import IsolationLevel, OpClass, Operation, Policy
from acidtables.core.log.records import (
    ColumnStats,
    CommitRecord,
    DataFile,
    FileKind,
    Protocol,
    Scope,
    TableMetadata,
    evolve,
    seal_entry,
    sealed_bytes,
    unseal_entry,
)
from acidtables.core.schema.ddl import parse_schema


def test_commit_record_round_trips_through_json() -> None:
    meta = TableMetadata(
        table_id="t1",
        name="a.b",
        location="/w/a/b",
        columns=parse_schema("id BIGINT NOT NULL, dt STRING", method="t"),
        partition_by=("dt",),
        conflict_policy=Policy.DELTA,
        isolation_level=IsolationLevel.SERIALIZABLE,
        row_level_concurrency=True,
        properties={"k": "v"},
        created_at=5,
    )
    record = CommitRecord(
        txn_id="x",
        version=3,
        read_version=1,
        operation=Operation.UPDATE,
        op_class=OpClass.UPD,
        policy=Policy.DELTA,
        isolation_level=IsolationLevel.SERIALIZABLE,
        committed_at=10,
        time_version=11,
        scope=Scope(({"dt": "a"},), parse_predicate("dt > 'a'", ["dt"])),
        read_predicates=(parse_predicate("id = 1", ["id"]),),  # type: ignore[arg-type]
        read_files=("data/x/f.parquet",),
        reads_whole_table=False,
        adds=(
            DataFile(
                "data/x/g.parquet",
                {"dt": "a"},
                3,
                30,
                {"id": ColumnStats(1, 3, 0)},
                True,
                FileKind.CHANGES,
                (1,),
                ("data/x/f.parquet",),
                True,
                None,
                {"tokens": ["a"]},
                "0123456789abcdef",
            ),
        ),
        removes=(DataFile("data/x/f.parquet", {"dt": "a"}, 4, 40, data_change=False),),
        app_ids={"s": 2},
        metadata=meta,
        protocol=Protocol(1, 2, ("deletionVectors",)),
        user_metadata={"job": "j"},
        retries=2,
    )
    back = CommitRecord.from_json(record.to_json())
    # adds read from the log carry the version that added them
    assert back.adds[0].added_version == 3
    assert back == record.__class__(**{**record.__dict__, "adds": back.adds})
    assert back.adds[0].to_json() == record.adds[0].to_json()


def _plain_record(**fields: object) -> CommitRecord:
    return CommitRecord(
        txn_id="x",
        version=3,
        read_version=2,
        operation=Operation.INSERT_INTO,
        op_class=OpClass.INS,
        policy=Policy.DELTA,
        isolation_level=IsolationLevel.WRITE_SERIALIZABLE,
        **fields,  # type: ignore[arg-type]
    )


def test_a_record_leaves_out_every_field_at_its_default() -> None:
    record = _plain_record(adds=(DataFile("data/f.parquet", {"dt": "a"}, 1, 10),), blind_append=True)
    assert record.to_json() == {
        "format": 1,
        "txn_id": "x",
        "version": 3,
        "read_version": 2,
        "operation": "insert_into",
        "op_class": "INS",
        "policy": "delta",
        "committed_at": 0,
        "adds": [{"path": "data/f.parquet", "partition": {"dt": "a"}, "rows": 1, "size_bytes": 10}],
        "isolation_level": "WriteSerializable",
        "blind_append": True,
    }
    assert "scope" in _plain_record(scope=Scope(())).to_json()  # no partition at all is not the whole table
    assert "multi_txn_id" in _plain_record(multi_txn_id="mtx-1", multi_txn_tables=("a.b", "a.c")).to_json()


@pytest.mark.parametrize(
    "changes",
    [
        {"version": 4, "committed_at": 7, "time_version": 8, "retries": 1, "commit_micros": 9},
        {"multi_txn_id": "mtx-1", "multi_txn_tables": ("a.b", "a.c")},
        {},
    ],
)
def test_evolve_makes_the_record_replace_makes(changes: dict[str, object]) -> None:
    record = _plain_record(app_ids={"s": 1}, user_metadata={"job": "j"})
    evolved = evolve(record, **changes)
    assert evolved == dataclasses.replace(record, **changes)  # type: ignore[arg-type]
    assert evolved is not record and record == _plain_record(app_ids={"s": 1}, user_metadata={"job": "j"})
    with pytest.raises(dataclasses.FrozenInstanceError):
        evolved.version = 5  # type: ignore[misc]
    file = DataFile("data/f.parquet", {"dt": "a"}, 1, 10)
    assert evolve(file, added_version=3) == dataclasses.replace(file, added_version=3)


def test_evolve_refuses_a_field_the_record_does_not_have() -> None:
    with pytest.raises(TypeError, match="no field"):
        evolve(_plain_record(), versoin=4)


def test_a_sealed_entry_is_encoded_once_and_reads_back_as_seal_entry_wrote_it() -> None:
    for entry in (_plain_record(scope=Scope(({"dt": "é"},))).to_json(), {"version": 1, "commit_file": "c.json"}, {}):
        encoded = sealed_bytes(entry)
        assert json.loads(encoded) == seal_entry(entry)
        assert unseal_entry(json.loads(encoded)) == entry
        assert encoded.isascii() and b" " not in encoded
    with pytest.raises(ValueError, match="checksum"):
        sealed_bytes(seal_entry({"version": 1}))


def test_every_exception_class_of_the_package_is_under_the_one_root() -> None:
    """Not only the public module: every exception class any acidtables module defines, private
    control-flow ones too (a refactor could let one escape)."""
    import importlib
    import pkgutil

    import acidtables

    found = []
    for module_info in pkgutil.walk_packages(acidtables.__path__, "acidtables."):
        if module_info.name.endswith(".__main__"):
            continue  # runs its command on import
        module = importlib.import_module(module_info.name)
        for _name, obj in inspect.getmembers(module, inspect.isclass):
            if issubclass(obj, BaseException) and obj.__module__ == module.__name__:
                found.append(obj)
    assert len(found) > 20
    # an interrupt is not an error: a job's SIGTERM (jobs.termination.Terminated) is a KeyboardInterrupt,
    # which no `except Exception` (nor `except AcidTablesError`) may catch on its way out
    interrupts = {c for c in found if issubclass(c, KeyboardInterrupt) and not issubclass(c, Exception)}
    assert {f"{c.__module__}.{c.__name__}" for c in interrupts} == {"acidtables.jobs.termination.Terminated"}
    outside = sorted(
        f"{c.__module__}.{c.__name__}" for c in found if not issubclass(c, AcidTablesError) and c not in interrupts
    )
    assert outside == []


def test_every_public_error_is_under_the_one_root() -> None:
    classes = [obj for _, obj in inspect.getmembers(public_errors, inspect.isclass)]
    assert classes and all(issubclass(c, AcidTablesError) for c in classes)
    conflicts = [c for c in classes if issubclass(c, ConcurrentModificationException)]
    assert {c.__name__ for c in conflicts} >= {
        "ConcurrentAppendException",
        "ConcurrentDeleteReadException",
        "ConcurrentDeleteDeleteException",
        "MetadataChangedException",
        "ConcurrentTransactionException",
        "ProtocolChangedException",
        "TransactionConflictException",
    }


def test_a_conflict_message_names_the_winner_the_partition_and_what_to_do() -> None:
    exc = TransactionConflictException(
        table="sales.orders",
        operation="UPDATE",
        read_version=40,
        winning_version=42,
        winning_operation="INSERT INTO",
        earlier_op="II",
        later_op="UD",
        scope="dt=2024-05-01",
    )
    assert str(exc).startswith(
        "[ACIDTABLES_TRANSACTION_CONFLICT] UPDATE on sales.orders [dt=2024-05-01] lost to INSERT INTO at version 42 "
        "(read version 40)"
    )
    assert "Nothing was committed" in str(exc) and "Re-run the job" in str(exc)
    assert exc.to_dict()["earlier_op"] == "II" and exc.to_dict()["winning_version"] == 42


@pytest.mark.parametrize(
    ("cls", "error_class"),
    [
        (ConcurrentAppendException, "DELTA_CONCURRENT_APPEND"),
        (ConcurrentDeleteReadException, "DELTA_CONCURRENT_DELETE_READ"),
        (ConcurrentDeleteDeleteException, "DELTA_CONCURRENT_DELETE_DELETE"),
        (MetadataChangedException, "DELTA_METADATA_CHANGED"),
        (ConcurrentTransactionException, "DELTA_CONCURRENT_TRANSACTION"),
        (ProtocolChangedException, "DELTA_PROTOCOL_CHANGED"),
    ],
)
def test_a_delta_conflict_carries_its_error_class_and_partition_hint(
    cls: type[ConcurrentModificationException], error_class: str
) -> None:
    exc = cls(
        table="sales.orders",
        operation="UPDATE",
        read_version=3,
        winning_version=4,
        winning_operation="INSERT INTO",
        scope="dt=a; dt=b",
        partition_hint="dt=b",
    )
    assert exc.error_class == error_class
    assert str(exc).startswith(f"[{error_class}] UPDATE on sales.orders [dt=b] lost to INSERT INTO at version 4")
    assert exc.partition_hint == "dt=b"
    assert exc.to_dict()["error_class"] == error_class and exc.to_dict()["partition_hint"] == "dt=b"


@pytest.mark.parametrize("name", ["insert into", "INSERT_INTO", "insert-into", Operation.INSERT_INTO])
def test_operation_names_are_forgiving_about_spelling(name: object) -> None:
    assert Operation.parse(name) is Operation.INSERT_INTO  # type: ignore[arg-type]


def test_an_unknown_operation_lists_the_valid_ones() -> None:
    from acidtables.errors import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match="insert_into, insert_overwrite"):
        Operation.parse("upsert")


def test_a_transaction_id_carries_its_writers_lease() -> None:
    from acidtables.core.commit.txn_ids import lease_of, new_txn_id

    txn_id = new_txn_id(0x694D_7A2B_1C3E_0042)
    assert len(txn_id) == 48 and lease_of(txn_id) == 0x694D_7A2B_1C3E_0042
    assert new_txn_id(7) != new_txn_id(7)  # unique per transaction, same lease
    assert lease_of("0" * 32) is None  # an id from before leases rode in ids, or a table's creation
    assert lease_of("Z" * 48) is None
