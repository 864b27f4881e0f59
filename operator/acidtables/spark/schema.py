"""Table schemas as Spark sees them, and the check every write makes against them.

A write whose DataFrame does not match the table fails before anything is staged, with a message that
names each offending column and both types, because a mismatch found later (at read time) would have
committed data nobody can read back correctly.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.types import DataType, StructField, StructType, _parse_datatype_string

# re-exported: the Spark side's names for the merge-on-read columns and operations, and partition text
from acidtables.core import DELETE as DELETE
from acidtables.core import INTEGRAL_TYPES as INTEGRAL_TYPES
from acidtables.core import OP_COLUMN as OP_COLUMN
from acidtables.core import SEQ_COLUMN as SEQ_COLUMN
from acidtables.core import TEXT_TYPES as TEXT_TYPES
from acidtables.core import UPSERT as UPSERT
from acidtables.core import Column, InvalidArgumentError, TableMetadata
from acidtables.core import log_partition_value as log_partition_value
from acidtables.core import partition_text as partition_text
from acidtables.core import typed_partition_value as typed_partition_value

_SIMPLE: dict[str, DataType] = {
    "BIGINT": T.LongType(),
    "LONG": T.LongType(),
    "INT": T.IntegerType(),
    "INTEGER": T.IntegerType(),
    "SMALLINT": T.ShortType(),
    "SHORT": T.ShortType(),
    "TINYINT": T.ByteType(),
    "BYTE": T.ByteType(),
    "DOUBLE": T.DoubleType(),
    "FLOAT": T.FloatType(),
    "REAL": T.FloatType(),
    "STRING": T.StringType(),
    "BOOLEAN": T.BooleanType(),
    "DATE": T.DateType(),
    "TIMESTAMP": T.TimestampType(),
    "TIMESTAMP_NTZ": T.TimestampNTZType(),
    "BINARY": T.BinaryType(),
}
_DECIMAL = re.compile(r"^DECIMAL\s*\(\s*(\d+)\s*,\s*(\d+)\s*\)$")
_TEXT = re.compile(r"^(VAR)?CHAR\s*\(\s*\d+\s*\)$")


def spark_type(type_ddl: str) -> DataType:
    """The Spark type of a column type. Primitive types are mapped here, because Spark's own parser
    needs a live session, which the data source's Python workers do not have."""
    upper = type_ddl.strip().upper()
    if upper in _SIMPLE:
        return _SIMPLE[upper]
    decimal = _DECIMAL.match(upper)
    if decimal:
        return T.DecimalType(int(decimal.group(1)), int(decimal.group(2)))
    if upper == "DECIMAL":
        return T.DecimalType(10, 0)
    if _TEXT.match(upper):
        return T.StringType()
    try:
        return _parse_datatype_string(type_ddl)
    except Exception as exc:  # pyspark raises ParseException subclasses from several modules
        raise InvalidArgumentError(f"column type {type_ddl!r} is not a Spark SQL type ({exc})") from None


def table_struct(meta: TableMetadata, columns: Sequence[Column] | None = None) -> StructType:
    return StructType([StructField(c.name, spark_type(c.type), c.nullable) for c in (columns or meta.columns)])


def read_struct(meta: TableMetadata) -> StructType:
    """The schema a reader promises: every column nullable, as Spark's own file sources do; NOT NULL is
    enforced where rows are written, and a read never fails on what the files hold."""
    return StructType([StructField(f.name, f.dataType, True) for f in table_struct(meta).fields])


#: the change feed's own columns, in Delta's names (SparkTable.changes, readChangeFeed)
CHANGE_TYPE, CHANGE_VERSION, CHANGE_TIME = "_change_type", "_commit_version", "_commit_timestamp"


def change_feed_struct(rows: StructType) -> StructType:
    """A table's rows with the change feed's columns after them."""
    return StructType(
        [
            *rows.fields,
            StructField(CHANGE_TYPE, T.StringType()),
            StructField(CHANGE_VERSION, T.LongType()),
            StructField(CHANGE_TIME, T.TimestampType()),
        ]
    )


def data_columns(meta: TableMetadata) -> list[Column]:
    """Columns stored inside the Parquet files; partition values live in the log instead."""
    partition = {p.lower() for p in meta.partition_by}
    return [c for c in meta.columns if c.name.lower() not in partition]


def file_struct(meta: TableMetadata) -> StructType:
    """The schema of a data file of this table (primary-key files carry the merge-on-read columns)."""
    fields = list(table_struct(meta, data_columns(meta)).fields)
    if meta.primary_key:
        from pyspark.sql.types import LongType, StringType

        fields += [StructField(OP_COLUMN, StringType(), True), StructField(SEQ_COLUMN, LongType(), True)]
    return StructType(fields)


def check_schema(meta: TableMetadata, struct: StructType, *, call: str, hint: str = "merge_schema=True") -> None:
    """Refuse a DataFrame schema that does not match the table, naming every offending column at once.

    Columns are matched by name, case-insensitively; a nullable/not-null difference, nested ones
    included, is no mismatch (NOT NULL is enforced on the rows written). `call` names the user's call,
    `hint` how its API adds columns.
    """
    expected = table_struct(meta)
    by_name = {f.name.lower(): f for f in struct.fields}
    problems = []
    for field in expected.fields:
        got = by_name.pop(field.name.lower(), None)
        if got is None:
            problems.append(f"missing column {field.name} {field.dataType.simpleString()}")
        elif nullable(got.dataType) != nullable(field.dataType):
            problems.append(
                f"column {field.name} is {got.dataType.simpleString()}, the table has {field.dataType.simpleString()}"
            )
    for extra in by_name.values():
        problems.append(f"extra column {extra.name} {extra.dataType.simpleString()} (use {hint} to add it)")
    if problems:
        raise InvalidArgumentError(
            f"{call}: the DataFrame does not match the table {meta.name} ({meta.schema_ddl}): " + "; ".join(problems)
        )


def nullable(data_type: DataType) -> DataType:
    """`data_type` with every nested field, element and value nullable: whether a struct's field may be
    NULL is no type mismatch (a `named_struct` of literals has NOT NULL fields, a table's struct type
    nullable ones)."""
    if isinstance(data_type, T.StructType):
        return T.StructType([T.StructField(f.name, nullable(f.dataType), True) for f in data_type.fields])
    if isinstance(data_type, T.ArrayType):
        return T.ArrayType(nullable(data_type.elementType), True)
    if isinstance(data_type, T.MapType):
        return T.MapType(nullable(data_type.keyType), nullable(data_type.valueType), True)
    return data_type


def conform(df: DataFrame, meta: TableMetadata, *, method: str) -> DataFrame:
    """`df` checked against the table schema (`check_schema`), with the table's column names and order."""
    check_schema(meta, df.schema, call=f"{method}()")
    return df.select(*[F.col(f"`{by_name_of(df, c.name)}`").alias(c.name) for c in meta.columns])


def by_name_of(df: DataFrame, name: str) -> str:
    for field in df.schema.fields:
        if field.name.lower() == name.lower():
            return field.name
    return name


def column_type(data_type: DataType) -> str:
    """A Spark type as a column type: `BIGINT`, `DECIMAL(10,2)`, `struct<x:int>` (a nested type keeps its
    field names as written)."""
    text = data_type.simpleString()
    return text.upper() if isinstance(data_type, T.AtomicType) else text


def frame_columns(df: DataFrame) -> list[Column]:
    """The columns of `df`, nullable as a table created from a query's are (Spark's CTAS)."""
    return [Column(f.name, column_type(f.dataType), True) for f in df.schema.fields]


def new_columns(df: DataFrame, meta: TableMetadata) -> list[Column]:
    """Columns of `df` the table does not have yet (for merge_schema=True)."""
    known = {c.name.lower() for c in meta.columns}
    return [c for c in frame_columns(df) if c.name.lower() not in known]
