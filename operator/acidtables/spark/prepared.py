"""A prepared operation: its files are staged, nothing is visible yet (design §5).

Every SparkTable operation runs as prepare-then-commit; `commit=False` hands this object back so a job
(or a test reproducing the seeds' interleavings) decides when the commit point comes. `abort()` removes
the staged files.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from acidtables.core import CommitInfo, Transaction


@dataclass
class Prepared:
    """Staged work of one operation. Commit it or abort it, once."""

    transaction: Transaction
    #: what the operation did, for logs and tests (rows written, files touched, ...)
    summary: dict[str, Any] = field(default_factory=dict)

    @property
    def operation(self) -> str:
        return self.transaction.operation.value

    @property
    def read_version(self) -> int:
        return self.transaction.read_version

    def commit(self) -> CommitInfo:
        return self.transaction.commit()

    def abort(self) -> None:
        self.transaction.abort()

    def __enter__(self) -> Prepared:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is not None:
            self.abort()


@contextmanager
def preparing(transaction: Transaction) -> Iterator[Transaction]:
    """Abort (delete staged files) if anything fails while preparing; a killed job leaves only staged
    files, which the table's cleanup removes once its lease is gone."""
    try:
        yield transaction
    except BaseException:
        transaction.abort()
        raise
