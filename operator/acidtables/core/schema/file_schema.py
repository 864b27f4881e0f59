"""Whether the table can read a Parquet file as its rows: the schema half of a commit's proof.

A file whose columns the reader cannot interpret must never commit. Before this check, a plain file added
to a primary-key table through the core API (no merge-on-read columns) read back as zero rows, and the
next major compaction rewrote its partition into nothing. The rules, from the footer alone (no data read):

* every stored column of the table (partition values live in the log) is in the file with a type Spark's
  Parquet reader widens to the table's (`INT` into `BIGINT`, `FLOAT` into `DOUBLE`, a decimal into a wider
  one), or is absent and nullable: the reader fills NULL, as for a column added after the file was
  written. A NOT NULL column, and a primary-key column, must be present;
* a partition column may be stored too (Spark ignores it: the log's value is the row's), with a
  compatible type;
* nothing else: a stray column would surface the day a column of that name is added;
* a primary-key table's files may carry the merge-on-read columns `_acid_op` (STRING, `U` upsert or `D`
  tombstone) and `_acid_seq` (BIGINT). A file without `_acid_op` holds upserts only, and one without
  `_acid_seq` orders its rows by the version that commits it: so a plain Parquet file is a valid change
  file of its rows. Other tables' files may carry neither;
* where the footer has statistics, primary-key columns and `_acid_op` hold no NULL, and `_acid_op` holds
  only `U` and `D`.

Every problem of a file is named at once, with what the table expects.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from acidtables.core.errors import InvalidArgumentError
from acidtables.core.log.records import FileKind, TableMetadata
from acidtables.core.schema.types import inner_type, split_top_level

#: the merge-on-read columns of primary-key files (spark/schema.py writes them under the same names)
OP_COLUMN = "_acid_op"
SEQ_COLUMN = "_acid_seq"
#: a merge-on-read row's operation: an upsert, or a tombstone for its key
UPSERT, DELETE = "U", "D"
MERGE_ON_READ_OPS = frozenset({UPSERT, DELETE})

_INTS = {"TINYINT": 8, "BYTE": 8, "SMALLINT": 16, "SHORT": 16, "INT": 32, "INTEGER": 32, "BIGINT": 64, "LONG": 64}
#: decimal digits an integer of a bit width needs (Spark reads INT32 into DECIMAL(p, s) with p - s >= 10)
_INT_DIGITS = {8: 3, 16: 5, 32: 10, 64: 20}


def _integer_width(file_type: pa.DataType) -> int | None:
    """Bits of signed range an integer column holds (uint8 fits in 16), or None for non-integers."""
    if pa.types.is_signed_integer(file_type):
        return int(file_type.bit_width)
    if pa.types.is_unsigned_integer(file_type) and file_type.bit_width < 64:
        return int(file_type.bit_width) * 2
    return None


def readable_as(file_type: pa.DataType, table_type: str) -> bool:
    """Whether Spark's Parquet reader (and the data source's Arrow reader) reads a column stored as
    `file_type` into a column of `table_type` (the log's normalized spelling) without losing values."""
    if pa.types.is_dictionary(file_type):
        return readable_as(file_type.value_type, table_type)
    upper = table_type.upper()
    head = upper.split("<", 1)[0].split("(", 1)[0].strip()
    if head in _INTS:
        width = _integer_width(file_type)
        return width is not None and width <= _INTS[head]
    if head in ("FLOAT", "REAL"):
        return bool(pa.types.is_float32(file_type))
    if head == "DOUBLE":
        if pa.types.is_floating(file_type):
            return not pa.types.is_float16(file_type)
        return (_integer_width(file_type) or 64) <= 32  # Spark widens INT32 (not INT64) to DOUBLE
    if head == "DECIMAL":
        precision, scale = (10, 0)
        if "(" in upper:
            precision, scale = (int(x) for x in upper[upper.index("(") + 1 : upper.index(")")].split(","))
        if pa.types.is_decimal(file_type):
            return bool(file_type.scale <= scale and file_type.precision - file_type.scale <= precision - scale)
        width = _integer_width(file_type)
        return width is not None and _INT_DIGITS[8 if width <= 8 else width] <= precision - scale
    if head in ("STRING", "CHAR", "VARCHAR"):
        return bool(pa.types.is_string(file_type) or pa.types.is_large_string(file_type))
    if head == "BINARY":
        return any(
            check(file_type)
            for check in (pa.types.is_binary, pa.types.is_large_binary, pa.types.is_string, pa.types.is_large_string)
        )
    if head == "BOOLEAN":
        return bool(pa.types.is_boolean(file_type))
    if head == "DATE":
        return bool(pa.types.is_date32(file_type))
    if head in ("TIMESTAMP", "TIMESTAMP_NTZ"):
        if pa.types.is_timestamp(file_type):
            return bool(file_type.unit != "ns")  # Spark refuses TIMESTAMP(NANOS)
        return head == "TIMESTAMP_NTZ" and pa.types.is_date32(file_type)
    if head == "ARRAY":
        is_list = pa.types.is_list(file_type) or pa.types.is_large_list(file_type)
        return is_list and readable_as(file_type.value_type, inner_type(table_type))
    if head == "MAP":
        if not pa.types.is_map(file_type):
            return False
        key, value = [p.strip() for p in split_top_level(inner_type(table_type))]
        return readable_as(file_type.key_type, key) and readable_as(file_type.item_type, value)
    if head == "STRUCT":
        if not pa.types.is_struct(file_type):
            return False
        stored = {file_type.field(i).name.lower(): file_type.field(i).type for i in range(file_type.num_fields)}
        for part in [p.strip() for p in split_top_level(inner_type(table_type))]:
            name, _, field_type = part.partition(":")
            got = stored.get(name.strip().lower())
            if got is not None and not readable_as(got, field_type.strip()):
                return False
        return True  # missing fields read as NULL, extra ones are ignored (Spark's struct reading)
    return False


def _type_text(file_type: pa.DataType) -> str:
    if pa.types.is_timestamp(file_type) and file_type.unit == "ns":
        return f"{file_type} (nanoseconds: Spark reads at most microseconds; write with coerce_timestamps='us')"
    return str(file_type)


def _column_stats(footer: Any, name: str) -> Iterator[Any]:
    """The statistics of a top-level column in each row group; None where a group has none."""
    for c in range(footer.num_columns):
        if footer.schema.column(c).path == name:
            for g in range(footer.num_row_groups):
                yield footer.row_group(g).column(c).statistics


def _nulls_and_values(footer: Any, name: str) -> tuple[int | None, set[Any] | None]:
    """Total NULLs and the set of min/max values of a column, each None where a row group lacks them."""
    nulls: int | None = 0
    values: set[Any] | None = set()
    for stats in _column_stats(footer, name):
        if stats is None:
            return None, None
        nulls = None if nulls is None or stats.null_count is None else nulls + stats.null_count
        if values is not None and stats.has_min_max:
            values.update((stats.min, stats.max))
        elif stats.num_values:
            values = None
    return nulls, values


#: hex digits of a stored-columns digest: 64 bits, so a file whose columns differ from its table's is
#: never taken for one that fits (DataFile.schema_digest)
_DIGEST_DIGITS = 16


def stored_columns_digest(schema: pa.Schema) -> str:
    """A digest of the columns a Parquet file stores, by name (exact case) and Arrow type, in any order.
    A file's (from its footer, when its commit proves it) equals its table's stored columns' exactly when
    Arrow's dataset scanner can read the file as the table's rows without help; a reader then needs no
    footer to decide (core.read.data_files). An INT96 timestamp is Arrow's nanoseconds here, a type no
    table column has, so such a file never matches."""
    spelled = "\n".join(sorted(f"{field.name}\t{field.type}" for field in schema))
    return hashlib.sha256(spelled.encode()).hexdigest()[:_DIGEST_DIGITS]


def names_in_other_case(file_type: pa.DataType, table_type: str, path: str) -> list[str]:
    """Struct fields (at any depth under `path`) the file spells in another case than the table."""
    head = table_type.strip().split("<", 1)[0].strip().upper()
    if head == "ARRAY" and (pa.types.is_list(file_type) or pa.types.is_large_list(file_type)):
        return names_in_other_case(file_type.value_type, inner_type(table_type), f"{path}[]")
    if head == "MAP" and pa.types.is_map(file_type):
        _, value = [p.strip() for p in split_top_level(inner_type(table_type))]
        return names_in_other_case(file_type.item_type, value, f"{path}{{}}")
    if head != "STRUCT" or not pa.types.is_struct(file_type):
        return []
    stored = {file_type.field(i).name.lower(): file_type.field(i) for i in range(file_type.num_fields)}
    found: list[str] = []
    for part in [p.strip() for p in split_top_level(inner_type(table_type))]:
        name, _, field_type = part.partition(":")
        name = name.strip().strip("`")
        field = stored.get(name.lower())
        if field is None:
            continue
        if field.name != name:
            found.append(f"{path}.{field.name} (the table's {path}.{name})")
        found += names_in_other_case(field.type, field_type.strip(), f"{path}.{name}")
    return found


def file_schema_problems(footer: Any, meta: TableMetadata, kind: FileKind, *, exact_names: bool = False) -> list[str]:
    """What makes a file with this footer unreadable as rows of `meta` (empty when it is fine).
    `exact_names`: names (struct fields too) must be spelled as the table spells them, not just match
    regardless of case as Spark's reader does (a Delta mirror's readers match them exactly)."""
    problems: list[str] = []
    try:
        schema = footer.schema.to_arrow_schema()
    except Exception as exc:  # pyarrow refuses some legal Parquet (e.g. INT96 with odd metadata)
        return [f"its Parquet schema has no Arrow equivalent ({exc})"]
    # Spark's own writer stores TIMESTAMP as INT96, which Arrow calls nanoseconds; Spark reads it back
    int96 = {
        footer.schema.column(c).path
        for c in range(footer.num_columns)
        if footer.schema.column(c).physical_type == "INT96"
    }
    stored: dict[str, pa.Field] = {}
    for field in schema:
        if field.name in int96 and pa.types.is_timestamp(field.type):
            field = field.with_type(pa.timestamp("us", "UTC"))
        if field.name.lower() in stored:
            problems.append(f"column {field.name} appears twice (names are case-insensitive)")
        stored[field.name.lower()] = field
    partition = {p.lower() for p in meta.partition_by}
    keys = {k.lower() for k in meta.primary_key}
    other_case: list[str] = []
    for column in meta.columns:
        field = stored.pop(column.name.lower(), None)
        if field is None:
            if column.name.lower() in partition:
                continue  # partition values are the log's
            if column.name.lower() in keys:
                problems.append(f"primary-key column {column.name} ({column.type}) is missing")
            elif not column.nullable:
                problems.append(f"NOT NULL column {column.name} ({column.type}) is missing")
            continue
        if exact_names:
            if field.name != column.name:
                other_case.append(f"{field.name} (the table's {column.name})")
            other_case += names_in_other_case(field.type, column.type, column.name)
        if not readable_as(field.type, column.type):
            problems.append(f"column {column.name} is {_type_text(field.type)}, which cannot be read as {column.type}")
        elif column.name.lower() in keys and column.name.lower() not in partition:
            nulls, _ = _nulls_and_values(footer, field.name)
            if nulls:
                problems.append(f"primary-key column {column.name} holds {nulls} NULL(s)")
    if other_case:
        problems.append(
            f"it spells {', '.join(other_case)} in another case, which readers of the table's Delta mirror "
            "(mirror.formats=delta) do not match"
        )
    if meta.primary_key:
        op = stored.pop(OP_COLUMN, None)
        if op is not None and not (pa.types.is_string(op.type) or pa.types.is_large_string(op.type)):
            problems.append(f"{OP_COLUMN} is {op.type}, not a STRING of 'U' (upsert) or 'D' (tombstone)")
        elif op is not None:
            nulls, values = _nulls_and_values(footer, op.name)
            if nulls:
                problems.append(f"{OP_COLUMN} holds {nulls} NULL(s); each row is 'U' (upsert) or 'D' (tombstone)")
            if values and not values <= MERGE_ON_READ_OPS:
                unknown = sorted(str(v) for v in values - MERGE_ON_READ_OPS)
                problems.append(f"{OP_COLUMN} holds {unknown}; only 'U' (upsert) and 'D' (tombstone) mean anything")
            if kind is FileKind.BASE and values and "D" in values:
                problems.append(f"a base file holds tombstones ({OP_COLUMN} 'D'); a base file has live rows only")
        seq = stored.pop(SEQ_COLUMN, None)
        if seq is not None and (_integer_width(seq.type) or 128) > 64:
            problems.append(f"{SEQ_COLUMN} is {seq.type}, not a BIGINT sequence")
    for field in stored.values():
        problems.append(f"column {field.name} ({field.type}) is not a column of the table")
    return problems


def check_file_schema(
    footer: Any, meta: TableMetadata, kind: FileKind, path: str, method: str, *, exact_names: bool = False
) -> None:
    """InvalidArgumentError naming every problem `file_schema_problems` finds in the file at `path`."""
    problems = file_schema_problems(footer, meta, kind, exact_names=exact_names)
    if problems:
        raise InvalidArgumentError(
            f"{method}(): {path} cannot be read as rows of {meta.name} ({meta.schema_ddl}"
            + (f", primary key {', '.join(meta.primary_key)}" if meta.primary_key else "")
            + "): "
            + "; ".join(problems)
            + "; nothing was committed"
        )


__all__ = [
    "MERGE_ON_READ_OPS",
    "OP_COLUMN",
    "SEQ_COLUMN",
    "check_file_schema",
    "file_schema_problems",
    "readable_as",
    "stored_columns_digest",
]
