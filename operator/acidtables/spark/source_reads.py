"""What a write's source DataFrame read of the table it writes to (conflict-rules §1.3 INS-R, §17).

Delta tracks every read of the target inside a transaction: an INSERT whose query read the target is
not a blind append, and a MERGE or overwrite whose source read the target read that much more. A
source here is a DataFrame built before the write, so its reads are found in its physical plan, each
scan of the table's files (from `SparkTable.read`, Spark reading the location itself, or a join or
aggregate over either) with the filters Spark pushed into it, and each scan of the `acidtables` data
source naming the table. Every scan is recorded: a job that filtered `dt = 'x'` and then `dt = 'y'`
read both, even if it writes only `dt = 'y'`.

What is recorded never under-states a read: pushed filters are conjuncts of the query's own filters,
so their AND selects at least the rows the query read; a scan with no filter Spark pushed, and every
scan of the data source (which applies no pushed filters), is a read of the whole table.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from pyspark.sql import DataFrame

from acidtables.core import DataFile, Expr, Transaction, might_match, parse_predicate

from .files import file_key, without_file_scheme
from .scan import SNAPSHOT_OPTION

logger = logging.getLogger(__name__)

_FILE_SCAN = "FileSourceScanExec"
_DATA_SOURCE_SCAN = "DataSourceV2ScanRelation"


@dataclass
class SourceReads:
    """The reads of one table found in a DataFrame's plan."""

    predicates: list[Expr] = field(default_factory=list)
    files: list[DataFile | str] = field(default_factory=list)
    whole_table: bool = False
    #: the oldest version a scan read, when older than the transaction's (a DataFrame read before it began)
    as_of: int | None = None

    @property
    def any(self) -> bool:
        return bool(self.predicates or self.files or self.whole_table)


def _iterate(seq: Any) -> Iterator[Any]:
    """A Scala collection from py4j, element by element."""
    iterator = seq.iterator()
    while iterator.hasNext():
        yield iterator.next()


def _leaves(plan: Any) -> Iterator[Any]:
    return _iterate(plan.collectLeaves())


def _under(path: str, location: str) -> bool:
    key = unquote(without_file_scheme(path)).rstrip("/")
    root = without_file_scheme(location).rstrip("/")
    return key == root or key.startswith(root + "/")


#: Spark's SQL for typed numeric literals (`5L`, `1.5D`, `2BD`) and its null check, outside strings
_TYPED_NUMBER = re.compile(r"\b(\d+(?:\.\d+)?)(?:BD|[LSYDF])\b")
_IS_NOT_NULL = re.compile(r"\bisnotnull\(([^()']+)\)")
_QUOTED = re.compile(r"('(?:[^'\\]|\\.|'')*')")


def _predicate_text(sql: str) -> str:
    """A Catalyst expression's `.sql()` in the SQL subset core parses: typed number literals lose their
    type suffix and `isnotnull(c)` becomes `c IS NOT NULL`; quoted strings are left as they are."""
    parts = _QUOTED.split(sql)
    for i in range(0, len(parts), 2):  # even parts lie outside quotes
        parts[i] = _IS_NOT_NULL.sub(r"\1 IS NOT NULL", _TYPED_NUMBER.sub(r"\1", parts[i]))
    return "".join(parts)


def _scan_reads(scan: Any, tx: Transaction) -> SourceReads | None:
    """The part of the table one file scan read, or None when it reads another location."""
    location = tx.storage.location
    if not any(_under(str(p), location) for p in _iterate(scan.relation().location().rootPaths())):
        return None
    meta = tx.metadata
    filters = [_predicate_text(f.sql()) for f in (*_iterate(scan.partitionFilters()), *_iterate(scan.dataFilters()))]
    predicate = parse_predicate(" AND ".join(filters), meta.column_types) if filters else None
    listed = {unquote(without_file_scheme(str(p))) for p in scan.relation().location().inputFiles()}
    # looked up by path, so a scan of one partition never lists the whole table
    found = tx.snapshot.find(tx.storage.relative(key) for key in listed)
    live = [f for f in found.values() if file_key(tx.storage, f) in listed]
    as_of = _snapshot_read(scan, tx)
    # files of an older snapshot that are gone at the transaction's version: read all the same (a commit
    # in between removed them, and rule 5 must see that the job read them)
    gone: list[DataFile | str] = []
    if as_of is not None:
        known = {file_key(tx.storage, f) for f in live}
        gone = [p for p in sorted(listed - known) if _under(p, location)]
    if predicate is None:
        return SourceReads(files=[*live, *gone], whole_table=True, as_of=as_of)
    read = [f for f in live if might_match(predicate, f.bounds())]
    return SourceReads(predicates=[predicate], files=[*read, *gone], as_of=as_of)


def _snapshot_read(scan: Any, tx: Transaction) -> int | None:
    """The version of `tx`'s table the scan read, from SparkTable.read's reader option, when it is older
    than the version the transaction starts from; None otherwise or when the scan does not say."""
    options = scan.relation().options()
    if not options.contains(SNAPSHOT_OPTION):
        return None
    table_id, _, version = str(options.apply(SNAPSHOT_OPTION)).rpartition("@")
    if table_id != tx.metadata.table_id or not version.isdigit():
        return None
    return int(version) if int(version) < tx.read_version else None


def _names_table(relation: Any, tx: Transaction) -> bool:
    """Whether a data-source relation reads this table through `format("acidtables")`."""
    if str(relation.table().name()) != "acidtables":
        return False
    options = relation.options()
    named = options.get("path") or options.get("table")
    if named is None:
        return False
    name = str(named)
    return name == tx.table_name or (f"default.{name}" == tx.table_name and "." not in name)


def find_source_reads(df: DataFrame, tx: Transaction) -> SourceReads:
    """Every read of `tx`'s table in `df`'s plan, merged."""
    found = SourceReads()
    execution = df._jdf.queryExecution()
    for leaf in _leaves(execution.sparkPlan()):
        if leaf.getClass().getSimpleName() != _FILE_SCAN:
            continue
        reads = _scan_reads(leaf, tx)
        if reads is not None:
            found.predicates += reads.predicates
            found.files += reads.files
            found.whole_table = found.whole_table or reads.whole_table
            if reads.as_of is not None:
                found.as_of = reads.as_of if found.as_of is None else min(found.as_of, reads.as_of)
    for leaf in _leaves(execution.optimizedPlan()):
        if leaf.getClass().getSimpleName() == _DATA_SOURCE_SCAN and _names_table(leaf.relation(), tx):
            found.whole_table = True  # a whole-table read records no files (Transaction.record_read)
    return found


def record_source_reads(df: DataFrame, tx: Transaction) -> bool:
    """Record in `tx` what `df` read of its table; True when it read any of it (the write is then not a
    blind append)."""
    reads = find_source_reads(df, tx)
    if not reads.any:
        return False
    for predicate in reads.predicates:
        tx.record_read(predicate=predicate)
    tx.record_read(files=reads.files, whole_table=reads.whole_table, as_of_version=reads.as_of)
    logger.debug(
        "%s: txn %s (read version %d) read its own table in its source: %d scan predicate(s), %d file(s)%s",
        tx.table_name,
        tx.txn_id,
        tx.read_version,
        len(reads.predicates),
        len(reads.files),
        ", the whole table" if reads.whole_table else "",
    )
    return True
