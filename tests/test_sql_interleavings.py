"""The seeds' interleavings again, with every job a SQL statement run with commit=False: SQL jobs meet the
same conflict rules as the API's (tests/test_spark_interleavings.py runs the same pairs through
SparkTable). E prepares, L prepares, E commits, L commits."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from pyspark.sql import SparkSession
from tests.spark_jobs import SCHEMA, Job, expect, make, rows, staged

from acidtables import Catalog
from acidtables.errors import (
    ConcurrentAppendException,
    ConcurrentDeleteReadException,
    TransactionConflictException,
)
from acidtables.spark import SparkTable, sql
from acidtables.spark.statements import references

Statement = Callable[[Catalog], Job]


def q(statement: str) -> Statement:
    """A job running `statement` ({t} is the table) with commit=False."""
    return lambda catalog: lambda t: staged(sql(t.spark, statement.format(t=t.name), catalog=catalog, commit=False))


INSERT_A = q("INSERT INTO {t} VALUES (90, 'a', 1.0)")
UPDATE_A = q("UPDATE {t} SET amount = amount + 100 WHERE dt = 'a'")
UPDATE_B = q("UPDATE {t} SET amount = amount + 100 WHERE dt = 'b'")
DELETE_A1 = q("DELETE FROM {t} WHERE dt = 'a' AND id = 1")
OVERWRITE_A = q("INSERT OVERWRITE {t} PARTITION (dt = 'a') VALUES (80, 8.0)")
MINOR_A = q("ALTER TABLE {t} PARTITION (dt = 'a') COMPACT MINOR")
MAJOR_B = q("ALTER TABLE {t} PARTITION (dt = 'b') COMPACT MAJOR")
OPTIMIZE_A = q("OPTIMIZE {t} WHERE dt = 'a'")
# reads its own target: not a blind append (INS-R, conflict-rules §1.3)
COPY_A = q("INSERT INTO {t} SELECT id + 100, dt, amount FROM {t} WHERE dt = 'a'")
MERGE_A = q(
    "MERGE INTO {t} o USING (SELECT id, dt, amount * 2 AS amount FROM {t} WHERE dt = 'a') u "
    "ON o.id = u.id AND o.dt = u.dt WHEN MATCHED THEN UPDATE SET amount = u.amount"
)

CASES: list[Any] = [
    # maxcompute (primary key), seed 000
    pytest.param(
        {"primary_key": ["id"]},
        OVERWRITE_A,
        INSERT_A,
        TransactionConflictException,
        lambda r: (80, "a", 8.0) in r,
        id="maxcompute-IO/T->II",
    ),
    pytest.param(
        {"primary_key": ["id"]}, UPDATE_A, UPDATE_A, TransactionConflictException, None, id="maxcompute-UD->UD"
    ),
    pytest.param({"primary_key": ["id"]}, MINOR_A, UPDATE_A, None, None, id="maxcompute-MinC->UD"),
    pytest.param({"primary_key": ["id"]}, INSERT_A, MAJOR_B, None, None, id="maxcompute-II->MajC-other-partition"),
    # maxcompute-transactional, seed 001
    pytest.param(
        {"conflict_policy": "maxcompute-transactional"},
        UPDATE_A,
        DELETE_A1,
        TransactionConflictException,
        None,
        id="transactional-UD->UD",
    ),
    pytest.param(
        {"conflict_policy": "maxcompute-transactional"}, INSERT_A, INSERT_A, None, None, id="transactional-II->II"
    ),
    # delta, S4/S5
    pytest.param(
        {"isolation_level": "Serializable"},
        INSERT_A,
        UPDATE_A,
        ConcurrentAppendException,
        None,
        id="Serializable-INSERT-UPDATE",
    ),
    pytest.param(
        {"isolation_level": "WriteSerializable"}, INSERT_A, UPDATE_A, None, None, id="WriteSerializable-INSERT-UPDATE"
    ),
    pytest.param({}, UPDATE_A, DELETE_A1, ConcurrentAppendException, None, id="UPDATE-DELETE"),
    pytest.param({}, OPTIMIZE_A, UPDATE_A, ConcurrentDeleteReadException, None, id="OPTIMIZE-UPDATE"),
    pytest.param({}, UPDATE_A, UPDATE_B, None, None, id="UPDATE-UPDATE-other-partition"),
    # a write whose source reads its own target is judged by what it read
    pytest.param(
        {"isolation_level": "Serializable"},
        INSERT_A,
        COPY_A,
        ConcurrentAppendException,
        None,
        id="Serializable-INSERT-then-INSERT-reading-the-target",
    ),
    pytest.param(
        {"isolation_level": "Serializable"},
        INSERT_A,
        q("INSERT INTO {t} VALUES (91, 'a', 2.0)"),
        None,
        None,
        id="Serializable-two-blind-appends",
    ),
    # rule 4 comes before rule 5: the UPDATE's new files land where the MERGE's source read
    pytest.param({}, UPDATE_A, MERGE_A, ConcurrentAppendException, None, id="UPDATE-then-MERGE-reading-the-target"),
]


@pytest.mark.parametrize(("options", "earlier", "later", "error", "check"), CASES)
def test_sql_jobs_meet_the_conflict_rules(
    spark: SparkSession,
    catalog: Catalog,
    options: dict[str, Any],
    earlier: Statement,
    later: Statement,
    error: type[Exception] | None,
    check: Callable[[list[Any]], bool] | None,
) -> None:
    t: SparkTable = make(spark, catalog, **options)
    expect(t, earlier(catalog), later(catalog), error, check or (lambda rows: True))


def test_a_source_pinned_before_a_commit_landed_is_read_again_at_the_transactions_version(
    spark: SparkSession, catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write reading its own target must read the version its transaction starts from: when a commit
    lands between pinning the source and beginning the transaction, the statement is prepared again."""
    t = make(spark, catalog)
    pin = references.Tables.pin
    landed: list[int] = []

    def pin_then_someone_commits(self: references.Tables, table: Any, version: Any = None) -> references.Pin:
        pinned = pin(self, table, version)
        if not landed:
            landed.append(t.insert_into(spark.createDataFrame([(50, "a", 5.0)], SCHEMA)).version)
        return pinned

    monkeypatch.setattr(references.Tables, "pin", pin_then_someone_commits)
    info = sql(spark, f"INSERT INTO {t.name} SELECT id + 100, dt, amount FROM {t.name} WHERE id = 50", catalog=catalog)
    assert info.version == landed[0] + 1 and not info.is_blind_append
    assert (150, "a", 5.0) in rows(t), "the source read the version the insert committed on"
