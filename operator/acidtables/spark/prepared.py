"""A prepared operation: its files are staged, nothing is visible yet (design §5).

Every SparkTable operation runs as prepare-then-commit; `commit=False` hands this object back so a job
(or a test reproducing the seeds' interleavings) decides when the commit point comes. `abort()` removes
the staged files; `join(tx)` makes it one part of a multi-table transaction (`catalog.transaction()`),
which commits it together with the other tables' parts.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

from pyspark.errors import PySparkException

from acidtables.core import CommitInfo, InvalidArgumentError, MultiTableTransaction, Transaction


@dataclass
class Prepared:
    """Staged work of one operation. Commit it or abort it, once."""

    transaction: Transaction
    #: what the operation did, for logs and tests (rows written, files touched, ...)
    summary: dict[str, Any] = field(default_factory=dict)
    #: Delta's operationMetrics for the job, which the commit's CommitInfo carries
    metrics: dict[str, int] = field(default_factory=dict)

    @property
    def operation(self) -> str:
        return self.transaction.operation.value

    @property
    def read_version(self) -> int:
        return self.transaction.read_version

    def commit(self) -> CommitInfo:
        if self.metrics:
            self.transaction.record_metrics(self.metrics)
        info = self.transaction.commit()
        return replace(info, metrics=dict(self.metrics)) if self.metrics else info

    def join(self, transaction: MultiTableTransaction) -> Prepared:
        """Make this operation one part of the multi-table transaction `transaction`
        (`catalog.transaction()`): it commits when that one commits, together with its other tables, or
        not at all. Its metrics are recorded on its transaction now, so its log entry (`history()`'s
        operationMetrics) has them as after `commit()`. Returns this Prepared.

        Once joined, its own `commit()` is refused and its `abort()` aborts the whole multi-table
        transaction. One part per table. An operation that cannot join (the multi-table transaction is
        no longer open, already has a part on this table, holds as many tables as it may, or belongs to
        another catalog) is aborted, its staged files deleted, and the error raised."""
        if not isinstance(transaction, MultiTableTransaction):
            raise InvalidArgumentError(
                "join(): expected a multi-table transaction (catalog.transaction()), found "
                f"{type(transaction).__name__}"
            )
        try:
            if self.metrics:
                self.transaction.record_metrics(self.metrics)
            transaction.add(self.transaction)
        except BaseException:
            self.transaction.abort()
            raise
        return self

    def abort(self) -> None:
        self.transaction.abort()

    def __enter__(self) -> Prepared:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is not None:
            self.abort()


def row_failure(exc: BaseException) -> str | None:
    """Spark's reason when a job failed evaluating an expression on a row of the data (SQLSTATE class
    22, a data exception such as a failed cast or a division by zero under ANSI; P0001, `raise_error`),
    else None: what the statement asked for cannot be done with these rows, which is the caller's to fix."""
    if not isinstance(exc, PySparkException):
        return None
    state = exc.getSqlState() or ""
    if state.startswith("22") or state == "P0001":
        return str(exc).strip().splitlines()[0]
    return None


@contextmanager
def preparing(transaction: Transaction) -> Iterator[Transaction]:
    """Abort (delete staged files) if anything fails while preparing; a killed job leaves only staged
    files, which the table's cleanup removes once its lease is gone. A row Spark cannot evaluate the
    statement's expressions on is reported as InvalidArgumentError naming the operation and the table."""
    try:
        yield transaction
    except BaseException as exc:
        transaction.abort()
        reason = row_failure(exc)
        if reason is None:
            raise
        raise InvalidArgumentError(
            f"{transaction.operation.value}(): Spark could not evaluate it on a row of {transaction.table_name}: "
            f"{reason}. Nothing was committed"
        ) from None
