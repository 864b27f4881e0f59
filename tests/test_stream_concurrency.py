"""A stream's commits meet batch jobs and compaction under each table's conflict policy, as batch commits
do: the job that lands between a micro-batch's staging and its commit is judged by the matrices, the
stream's commit rebases where they allow it and fails with their named exception where they do not,
and a restart from the checkpoint then commits the batch. Every row is accounted for.

The interleaving is controlled: SparkTable.write_stream runs each micro-batch in this process
(foreachBatch), so the test runs the other job to completion right after the batch's files are staged
and before its commit.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession
from tests.helpers.streams import drop_batch, events, query_id
from tests.jobs import assert_invariants
from tests.spark_jobs import Job, comp, ins, make, rows

from acidtables import Catalog
from acidtables.spark import SparkTable, files, writes

STREAMED = [(100, "a", 1.0), (101, "b", 2.0)]
INSERTED = [(50, "a", 5.0)]
TXN = {"conflict_policy": "maxcompute-transactional"}
PK = {"primary_key": ["id"]}
CASES: list[Any] = [
    # a blind append after a compaction or an append: no conflict on a delta table
    pytest.param({}, comp("minor"), [], None, id="delta:compaction->stream"),
    pytest.param({}, ins(INSERTED), INSERTED, None, id="delta:insert->stream"),
    # maxcompute, primary key (seed 000): compaction -> II both OK; II -> II the later fails
    pytest.param(PK, comp("minor"), [], None, id="maxcompute:MinC->stream"),
    pytest.param(PK, ins(INSERTED), INSERTED, "TransactionConflictException", id="maxcompute:II->stream"),
    # maxcompute-transactional (seed 001): SFM -> II and II -> II both OK
    pytest.param(TXN, comp("minor"), [], None, id="transactional:SFM->stream"),
    pytest.param(TXN, ins(INSERTED), INSERTED, None, id="transactional:II->stream"),
]


@pytest.fixture
def between_staging_and_commit(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """Jobs to run (once each) when a write has staged its files and not yet committed."""
    pending: list[Any] = []
    staged = files.write_staged

    def staging_then_jobs(*args: Any, **kwargs: Any) -> Any:
        files = staged(*args, **kwargs)
        while pending:
            pending.pop(0)()
        return files

    monkeypatch.setattr(writes, "write_staged", staging_then_jobs)
    yield pending


@pytest.mark.parametrize(("flavour", "other", "other_rows", "error"), CASES)
def test_a_job_landing_inside_a_micro_batch_is_judged_by_the_policy(
    spark: SparkSession,
    catalog: Catalog,
    tmp_path: Path,
    between_staging_and_commit: list[Any],
    flavour: dict[str, Any],
    other: Job,
    other_rows: list[tuple[int, str, float]],
    error: str | None,
) -> None:
    t = make(spark, catalog, **flavour)
    before = rows(t)
    drop_batch(tmp_path / "inbox", "a", STREAMED)
    checkpoint = str(tmp_path / "checkpoint")
    landed: list[int] = []
    between_staging_and_commit.append(lambda: landed.append(other(t).commit().version))

    query = t.write_stream(events(spark, tmp_path / "inbox"), checkpoint, trigger={"availableNow": True})
    if error is None:
        assert query.awaitTermination(240)
    else:
        with pytest.raises(StreamingQueryException, match=error):
            query.awaitTermination(240)
        assert query_id(tmp_path / "checkpoint") not in {a for c in t.table.commits(1) for a in c.app_ids}
        restarted = t.write_stream(events(spark, tmp_path / "inbox"), checkpoint, trigger={"availableNow": True})
        assert restarted.awaitTermination(240)

    assert len(landed) == 1, "the other job did not run inside the micro-batch"
    assert rows(t) == sorted(before + other_rows + STREAMED)
    batches = [c.app_ids for c in t.table.commits(1) if c.app_ids]
    assert batches == [{query_id(tmp_path / "checkpoint"): 0}]
    assert_invariants(t.table)


def test_a_micro_batch_is_a_blind_append(spark: SparkSession, catalog: Catalog, tmp_path: Path) -> None:
    """A micro-batch reads nothing of the table it writes, so its commit is a blind append (Delta's
    isBlindAppend), which is what lets it pass concurrent updates of a delta table."""
    t = make(spark, catalog)
    drop_batch(tmp_path / "inbox", "a", STREAMED)
    query = SparkTable(spark, t.table).write_stream(
        events(spark, tmp_path / "inbox"), str(tmp_path / "cp"), trigger={"availableNow": True}
    )
    assert query.awaitTermination(240)
    assert [c.blind_append for c in t.table.commits(t.table.version)] == [True]
