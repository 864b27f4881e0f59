"""Reading a snapshot's files with Spark's native Parquet reader, partition values as the log has them.

Spark's part-file names repeat across partition directories and Spark drops partition columns from
the files it writes, so a read must put each file's partition values (and, for updates and
compactions, its name and the version that added it) back on its rows. Two ways, both without
listing any directory:

* **Verified directory values** (plain reads, no deletion vectors): every file this library writes
  sits in Hive-style ``col=value`` directories, under one root for the whole table (`write_staged`).
  When, for every file of the read, Spark's own parse of those directory names is provably the value
  the log holds (same string after Spark's unescaping, same integer), Spark is asked to attach them
  itself, as it does for any partitioned table: a constant per file, no per-row work. Anything it
  cannot prove (other types, files placed elsewhere, escapes Spark would read differently) takes the
  second way.
* **Join by Spark's own file name**: one broadcast join of ``_metadata.file_path``, spelled exactly
  as Spark spells it (learnt once per file from the scan's own file list on the driver), to the log's
  entry. A row whose file the log does not name fails the job loudly instead of vanishing.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence
from urllib.parse import unquote

from pyspark.sql import Column, DataFrame, DataFrameReader, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from acidtables.core import (
    HIVE_NULL,
    STAGING_LEVELS,
    AcidTablesError,
    DataFile,
    FileKind,
    Storage,
    TableMetadata,
    check_files_exist,
)

from .files import FILE, ROW, VERSION, file_key, without_file_scheme
from .schema import (
    DELETE,
    INTEGRAL_TYPES,
    OP_COLUMN,
    SEQ_COLUMN,
    TEXT_TYPES,
    UPSERT,
    file_struct,
    partition_text,
    spark_type,
    table_struct,
)

_SPARK_PATH = "_acid_spark_path"
_WELL_FORMED_ESCAPES = re.compile(r"%(?![0-9A-Fa-f]{2})")
_ESCAPE = re.compile(r"%([0-9A-Fa-f]{2})")


def _spark_unescape(raw: str) -> str | None:
    """What Spark reads a partition directory value as (ExternalCatalogUtils.unescapePathName), or
    None where its reading is not certain (a '%' not followed by two hex digits)."""
    if _WELL_FORMED_ESCAPES.search(raw):
        return None
    return _ESCAPE.sub(lambda m: chr(int(m.group(1), 16)), raw)


def _directory_value_is_log_value(type_name: str, raw: str, value: object) -> bool:
    if raw == HIVE_NULL:
        return value is None
    if value is None or not raw:
        return False  # Spark refuses an empty directory value ("dt="): such a file must take the join
    base = type_name.upper().split("(")[0]
    if base in TEXT_TYPES:
        return isinstance(value, str) and value != HIVE_NULL and _spark_unescape(raw) == value
    if base in INTEGRAL_TYPES:
        return isinstance(value, int) and not isinstance(value, bool) and raw == str(value)
    return False


def _directories_agree(meta: TableMetadata, storage: Storage, files: Sequence[DataFile]) -> bool:
    """True when Spark, reading `files` with data/ as basePath, attaches to every file the partition
    values the log holds for it (see the module docstring).

    That needs every file where `Storage.new_write_dir` puts it, with one directory per partition column
    below: Spark walks up from the file through `name=value` directories, so all files then share the
    root `Storage.data_root()` and the same partition columns.
    """
    types = {c.name: c.type for c in meta.columns}
    depth = len(meta.partition_by)
    for f in files:
        directories = storage.partition_dirs(f.path, depth)
        if directories is None:
            return False
        for column, segment in zip(meta.partition_by, directories, strict=True):
            name, sep, raw = segment.partition("=")
            if not sep or name != column:
                return False
            if not _directory_value_is_log_value(types[column], raw, f.partition.get(column)):
                return False
    return True


def _layout_struct(meta: TableMetadata) -> StructType:
    """The table's columns plus the two staging directory levels Spark discovers as partition columns."""
    levels = [StructField(level, StringType()) for level in STAGING_LEVELS]
    return StructType([*table_struct(meta).fields, *levels])


def _spark_spelling(uri: str) -> str:
    """`_metadata.file_path` for a file that `inputFiles()` lists as `uri`: the same URI, but Hadoop
    writes an empty authority as none (file:///tmp/x is file:/tmp/x)."""
    return re.sub(r"^([A-Za-z][A-Za-z0-9+.-]*):///", r"\1:/", uri)


def _log_key(uri: str) -> str:
    """The file_key of the file Spark lists as `uri`."""
    return unquote(without_file_scheme(uri))


def _file_entries(
    spark: SparkSession, meta: TableMetadata, storage: Storage, files: Sequence[DataFile], scan: DataFrame
) -> DataFrame:
    """One row per file: Spark's spelling of its path, its key, partition values and adding version."""
    by_key = {file_key(storage, f): f for f in files}
    rows = []
    for uri in scan.inputFiles():
        key = _log_key(uri)
        f = by_key.get(key)
        if f is None:
            raise AcidTablesError(f"acidtables: Spark lists {uri!r}, which the snapshot does not name")
        rows.append(
            (
                _spark_spelling(uri),
                key,
                *(partition_text(f.partition.get(c)) for c in meta.partition_by),
                f.added_version,
            )
        )
    # Partition values travel as text and are cast by Spark: the log keeps DATE, TIMESTAMP and DECIMAL
    # values as the strings their directories spelled, which a typed DataFrame would refuse
    schema = StructType(
        [
            StructField(_SPARK_PATH, StringType(), False),
            StructField(FILE, StringType(), False),
            *[StructField(c, StringType(), True) for c in meta.partition_by],
            StructField(VERSION, LongType(), True),
        ]
    )
    types = {c.name: spark_type(c.type) for c in meta.columns}
    entries = spark.createDataFrame(rows, schema)
    return entries.select(_SPARK_PATH, FILE, *[F.col(c).cast(types[c]).alias(c) for c in meta.partition_by], VERSION)


def _known_file(column: str) -> Column:
    """`column` from the log's entry, or a failed job for a row whose file the log does not name."""
    unknown = F.raise_error(F.concat(F.lit("acidtables: no log entry for Spark's file "), F.col(_SPARK_PATH)))
    return F.when(F.col(FILE).isNull(), unknown).otherwise(F.col(column)).alias(column)


#: the reader option naming the snapshot a read of the latest version saw, `<table id>@<version>`:
#: Parquet ignores it, and a write whose source DataFrame reads its own table finds it in the plan
#: (spark.source_reads) and has the commits since that version judged too. Time travel and change reads
#: do not carry it: an old version read on purpose is not a read that missed later commits.
SNAPSHOT_OPTION = "acidtables.snapshot"


def _reader(spark: SparkSession, meta: TableMetadata, version: int, latest: bool) -> DataFrameReader:
    return spark.read.option(SNAPSHOT_OPTION, f"{meta.table_id}@{version}") if latest else spark.read


#: above this many paths Spark lists them in a Spark job of its own (InMemoryFileIndex)
_PARALLEL_LISTING = "spark.sql.sources.parallelPartitionDiscovery.threshold"
_listing = threading.Lock()


def _parquet(spark: SparkSession, storage: Storage, reader: DataFrameReader, paths: Sequence[str]) -> DataFrame:
    """`reader.parquet(*paths)`. Spark lists the paths it is given while the DataFrame is made, and past
    32 of them it runs a job to do it: 2.5 s for a thousand local files on this machine, where one stat
    each on the driver takes milliseconds (and every file was just proved to exist). So on a local file
    system the listing stays on the driver; an object store keeps Spark's parallel listing."""
    if not storage.is_local:
        return reader.parquet(*paths)
    with _listing:  # two threads must not each restore the other's raised threshold
        threshold = int(spark.conf.get(_PARALLEL_LISTING) or 32)
        if len(paths) <= threshold:
            return reader.parquet(*paths)
        spark.conf.set(_PARALLEL_LISTING, str(len(paths)))
        try:
            return reader.parquet(*paths)
        finally:
            spark.conf.set(_PARALLEL_LISTING, str(threshold))


def read_files(
    spark: SparkSession,
    meta: TableMetadata,
    storage: Storage,
    files: Sequence[DataFile],
    *,
    version: int,
    keep_helpers: bool = False,
    latest: bool = False,
) -> DataFrame:
    """The rows of `files` (of version `version`) with partition columns from the log, deletion vectors
    applied.

    Every file is first proved to exist (`check_files_exist`: a stat each, or one listing on an object
    store), so a file that vanished fails here, while the read is planned, with DataFilesMissingError
    naming the table, `version`, the file and the repair, instead of Spark's PATH_NOT_FOUND from a task
    halfway through a job. With `keep_helpers`, rows keep their file key, row position and the version
    that added the file (and the merge-on-read columns of primary-key tables), which updates and
    compactions need.
    """
    columns = [c.name for c in meta.columns]
    extra = []
    if keep_helpers:
        extra = [FILE, ROW, VERSION] + ([OP_COLUMN, SEQ_COLUMN] if meta.primary_key else [])
    if not files:
        # what a scan gives (the file schema) plus what the log adds, all typed: nothing to read
        types = {f.name: f.dataType for f in table_struct(meta).fields}
        types.update({FILE: StringType(), ROW: LongType(), VERSION: LongType()})
        added = [F.lit(None).cast(types[c]).alias(c) for c in (*meta.partition_by, FILE, ROW, VERSION)]
        # every column nullable, as a read of files gives them (read_struct), whatever the table declares
        empty = StructType([StructField(f.name, f.dataType, True) for f in file_struct(meta).fields])
        return spark.createDataFrame([], empty).select("*", *added).select(*columns, *extra)
    check_files_exist(storage, files, table=meta.name, version=version)
    paths = [storage.absolute(f.path) for f in files]
    plain = not keep_helpers and not any(f.deletion_vector for f in files)
    if plain and not meta.partition_by:
        reader = _reader(spark, meta, version, latest).schema(file_struct(meta))
        return _parquet(spark, storage, reader, paths).select(*columns)
    if plain and _directories_agree(meta, storage, files):
        reader = _reader(spark, meta, version, latest).schema(_layout_struct(meta))
        scan = _parquet(spark, storage, reader.option("basePath", storage.data_root()), paths)
        return scan.select(*columns)
    scan = _parquet(spark, storage, _reader(spark, meta, version, latest).schema(file_struct(meta)), paths)
    entries = _file_entries(spark, meta, storage, files, scan)
    df = scan.select("*", F.col("_metadata.file_path").alias(_SPARK_PATH), F.col("_metadata.row_index").alias(ROW))
    df = df.join(F.broadcast(entries), _SPARK_PATH, "left")
    df = df.select(
        *[c for c in df.columns if c not in (FILE, VERSION, *meta.partition_by)],
        *[_known_file(c) for c in (FILE, VERSION, *meta.partition_by)],
    )
    hidden = [(file_key(storage, f), pos) for f in files for pos in (f.deletion_vector or ())]
    if hidden:
        dv = spark.createDataFrame(hidden, f"{FILE} STRING, {ROW} LONG")
        df = df.join(F.broadcast(dv), [FILE, ROW], "left_anti")
    return df.select(*columns, *[row_operation().alias(c) if c == OP_COLUMN else c for c in extra])


def merge_on_read(df: DataFrame, meta: TableMetadata) -> DataFrame:
    """Primary-key tables: per (partition, key) the newest row wins; tombstones drop out."""
    return newest_per_key(df, meta).filter(F.col(OP_COLUMN) != F.lit(DELETE))


def newest_per_key(df: DataFrame, meta: TableMetadata) -> DataFrame:
    """Per (partition, key) the newest row, tombstones included (what merge-on-read filters).

    A row's sequence is its own `_acid_seq` (kept by compactions) or else the version that added its
    file, which the log assigned at commit time, so a rebased commit still orders correctly (D-07).
    Ties go to the greater file key, then the later row: core.read.merge (Table.scan) orders the same way.
    """
    seq = F.coalesce(F.col(SEQ_COLUMN), F.col(VERSION))
    # the file breaks a tie between files of one version (the data source's tasks can each write a row
    # for one key), so every reader picks the same row
    window = Window.partitionBy(*meta.partition_by, *meta.primary_key).orderBy(
        seq.desc(), F.col(FILE).desc(), F.col(ROW).desc()
    )
    return df.withColumn("_acid_rank", F.row_number().over(window)).filter("_acid_rank = 1").drop("_acid_rank")


def row_operation() -> Column:
    """A primary-key row's operation: its `_acid_op`, or an upsert where the file has no such column (a
    plain Parquet file committed through the core API holds upserts). Any other value fails the read
    naming the file, never drops the row: the commit proof refuses such files, so this is damage."""
    op = F.coalesce(F.col(OP_COLUMN), F.lit(UPSERT))
    unknown = F.raise_error(
        F.concat(
            F.lit(f"acidtables: {OP_COLUMN} is neither 'U' nor 'D' in "),
            F.col(FILE),
            F.lit(" at row "),
            F.col(ROW).cast("string"),
            F.lit("; run `acidtables fsck` on the table"),
        )
    )
    return F.when(op.isin(UPSERT, DELETE), op).otherwise(unknown)


def read_snapshot_rows(
    spark: SparkSession,
    meta: TableMetadata,
    storage: Storage,
    files: Sequence[DataFile],
    *,
    version: int,
    keep_helpers: bool = False,
    latest: bool = False,
) -> DataFrame:
    """What a reader sees of `files` of version `version`: for primary-key tables after merge-on-read,
    unless every file is a base file (major-compacted: one live row per key), where the window is
    skipped. Missing files fail the plan (`read_files`)."""
    if not meta.primary_key:
        return read_files(spark, meta, storage, files, version=version, keep_helpers=keep_helpers, latest=latest)
    if all(f.kind is FileKind.BASE for f in files) and not keep_helpers:
        # major-compacted: one live row per key already, so no merge and no helper columns
        return read_files(spark, meta, storage, files, version=version, latest=latest)
    raw = read_files(spark, meta, storage, files, version=version, keep_helpers=True, latest=latest)
    live = raw if all(f.kind is FileKind.BASE for f in files) else merge_on_read(raw, meta)
    if keep_helpers:
        return live
    return live.select(*[c.name for c in meta.columns])


__all__ = ["merge_on_read", "newest_per_key", "read_files", "read_snapshot_rows", "row_operation"]
