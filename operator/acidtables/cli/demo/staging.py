"""The core demo's data work: small Parquet files written and read with pyarrow, as a job's tasks would.

The Spark demo does the same work with Spark (`demo.spark`); the scenarios and views do not care which.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from acidtables.core import DataFile, FileKind, Operation, Transaction

from .scenarios import Job

_ARROW_SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string()), ("dt", pa.string())])


class FileStager:
    """Stages a job's files under the transaction's staging dir and tells the transaction about them."""

    def __init__(self) -> None:
        self._ids = itertools.count(1)
        self._names = itertools.count(1)

    def _write(self, txn: Transaction, partition: str, rows: pa.Table, **file_fields: Any) -> DataFile:
        storage = txn.storage
        path = f"{storage.new_write_dir(txn.txn_id)}/part-{next(self._names):05d}.parquet"
        sink = pa.BufferOutputStream()
        pq.write_table(rows, sink)
        payload = sink.getvalue().to_pybytes()
        storage.write_exclusive(path, payload)  # a staged file is never overwritten (design §2)
        if txn.metadata.primary_key and "kind" not in file_fields:
            file_fields["kind"] = FileKind.CHANGES  # primary-key tables are merge-on-read (design §4)
        return DataFile(
            path=path, partition={"dt": partition}, rows=rows.num_rows, size_bytes=len(payload), **file_fields
        )

    def _new_rows(self, partition: str, count: int, value: str) -> pa.Table:
        ids = [next(self._ids) for _ in range(count)]
        return pa.table({"id": ids, "v": [value] * count, "dt": [partition] * count}, schema=_ARROW_SCHEMA)

    @staticmethod
    def _read(txn: Transaction, files: Sequence[DataFile]) -> pa.Table:
        parts = []
        for f in files:
            with txn.storage.open_input(f.path) as handle:
                parts.append(pq.read_table(handle))
        return pa.concat_tables(parts) if parts else _ARROW_SCHEMA.empty_table()

    def load(self, txn: Transaction, partition: str, files: int, rows_per_file: int) -> None:
        txn.add_files(
            [self._write(txn, partition, self._new_rows(partition, rows_per_file, "v0")) for _ in range(files)]
        )

    def stage(self, txn: Transaction, job: Job) -> None:
        dt = job.partition
        if job.operation is Operation.INSERT_INTO:
            txn.add_files([self._write(txn, dt, self._new_rows(dt, 1, "inserted"))])
        elif job.operation is Operation.UPDATE:
            # UPDATE ... SET v = 'updated' WHERE dt = <partition>: scan() records the read
            matched = txn.scan(f"dt = '{dt}'")
            rows = self._read(txn, matched)
            updated = rows.set_column(1, "v", pa.array(["updated"] * rows.num_rows, pa.string()))
            if not txn.metadata.primary_key:
                # copy-on-write replaces the matched files; a primary-key table is merge-on-read instead,
                # and the new file holds only the new row versions, keyed by primary key (design §4)
                txn.remove_files(matched)
            txn.add_files([self._write(txn, dt, updated)])
        elif job.operation is Operation.MINOR_COMPACT:
            # a compaction records its inputs as removes only, never as reads (conflict-rules D-16)
            inputs = [f for f in txn.snapshot.files if f.partition.get("dt") == dt]
            merged = self._read(txn, inputs)
            txn.remove_files(inputs)
            txn.add_files([self._write(txn, dt, merged, lineage=tuple(f.path for f in inputs), ordered_lineage=True)])
        else:
            raise NotImplementedError(f"the demo stager has no {job.operation.display}")
