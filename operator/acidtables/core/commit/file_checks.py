"""A commit proves its files before the compare-and-swap (the issue "a table owns its location", item 3).

`Transaction.add_files` runs these checks on every file it is given, while the job is staging, so a
commit never makes visible a path that does not exist, lies outside the table, sits in another
transaction's staging directory, has another size, row count or partition than its entry says, or holds
columns the table cannot read as its rows (file_schema). Sizes
come from one `stat` and row counts from the Parquet footer, which the Spark writer has already read
through the same Storage (`Storage.parquet_footer` keeps it), so the proof costs no second read there.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from urllib.parse import unquote

from acidtables.core.errors import InvalidArgumentError
from acidtables.core.expressions import Literal
from acidtables.core.log.records import DataFile, TableMetadata
from acidtables.core.mirror import mirror_formats
from acidtables.core.schema.file_schema import check_file_schema, stored_columns_digest
from acidtables.core.storage.storage import DATA_DIR, HIVE_NULL, STAGING_PREFIX, Storage


def _directory_spells(raw: str, value: Literal) -> bool:
    """Whether a Hive-style directory value (`dt=2026-11-01`, escaped as Spark escapes) names `value`."""
    text = unquote(raw)
    if value is None:
        return text == HIVE_NULL
    if isinstance(value, bool):
        return text.lower() == str(value).lower()
    if isinstance(value, int | float):
        try:
            return float(text) == float(value)
        except ValueError:
            return False
    return text == str(value)


def check_partition_directories(path: str, partition: Mapping[str, Literal], method: str) -> None:
    """Every `column=value` directory on the path that names a partition column spells the file's value."""
    by_lower = {column.lower(): column for column in partition}
    for segment in path.split("/")[:-1]:
        name, sep, raw = segment.partition("=")
        column = by_lower.get(name.lower()) if sep else None
        if column is not None and not _directory_spells(raw, partition[column]):
            raise InvalidArgumentError(
                f"{method}(): {path} lies in directory {segment} but its entry says {column}={partition[column]!r}; "
                "a file's partition values must be the ones its directory spells"
            )


def prove_new_file(storage: Storage, file: DataFile, txn_id: str, meta: TableMetadata, method: str) -> str:
    """The checks for a file that is new to the table (`file.path` relative to the location); `meta` is
    what the transaction commits (its pending schema change included). Returns the digest of the columns
    the file stores (`stored_columns_digest`), which its entry keeps for readers."""
    path = file.path
    clean = posixpath.normpath(path)
    if "://" in path or path.startswith("/") or clean == ".." or clean.startswith("../"):
        raise InvalidArgumentError(
            f"{method}(): {path} is not inside the table location {storage.location}; a table's files live in its "
            "own location (write them under the transaction's staging_dir)"
        )
    if clean.startswith(f"{DATA_DIR}/{STAGING_PREFIX}") and not storage.staged_by(clean, txn_id):
        raise InvalidArgumentError(
            f"{method}(): {path} lies in another transaction's staging directory; a transaction adds only files it "
            "wrote itself"
        )
    size = storage.file_size(path)
    if size is None:
        raise InvalidArgumentError(f"{method}(): {storage.absolute(path)} does not exist (or is not a file)")
    if size != file.size_bytes:
        raise InvalidArgumentError(
            f"{method}(): {path} has {size} bytes but its entry says {file.size_bytes}; describe the file as written"
        )
    try:
        footer = storage.parquet_footer(path)
    except Exception as exc:  # OSError, ArrowInvalid: anything pyarrow cannot read as Parquet
        raise InvalidArgumentError(f"{method}(): {path} is not a readable Parquet file ({exc})") from None
    if footer.num_rows != file.rows:
        raise InvalidArgumentError(
            f"{method}(): {path} holds {footer.num_rows} rows (Parquet footer) but its entry says {file.rows}"
        )
    check_file_schema(footer, meta, file.kind, path, method, exact_names="delta" in mirror_formats(meta))
    if meta.partition_by:
        check_partition_directories(path, file.partition, method)
    return stored_columns_digest(footer.schema.to_arrow_schema())


def prove_re_added_file(live: DataFile, file: DataFile, method: str) -> None:
    """A file the table has, re-added (a new deletion vector): the same bytes, so the same size and rows."""
    if (file.size_bytes, file.rows, dict(file.partition)) != (live.size_bytes, live.rows, dict(live.partition)):
        raise InvalidArgumentError(
            f"{method}(): {file.path} is re-added with {file.rows} rows, {file.size_bytes} bytes and partition "
            f"{dict(file.partition)}, but the table has it with {live.rows} rows, {live.size_bytes} bytes and "
            f"{dict(live.partition)}; a re-added file changes only its deletion vector"
        )
