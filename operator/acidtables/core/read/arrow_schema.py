"""A table's columns as Arrow types: the schema every reader without Spark hands back.

The mapping is Spark's own (`pyspark.sql.pandas.types.to_arrow_type`, with timestamps as UTC instants),
so rows read here and rows Spark reads convert to the same Python values, and the data source's Python
workers, which hand Arrow batches to Spark, can use this schema as is. It is written out here because
core imports no Spark; tests check it against Spark's for every type a table may declare.
"""

from __future__ import annotations

import pyarrow as pa

from acidtables.core.errors import InvalidArgumentError
from acidtables.core.log.records import TableMetadata
from acidtables.core.schema.types import inner_type, split_top_level

#: the time zone TIMESTAMP columns are read in: instants, as Spark hands them to Arrow
TIMESTAMP_ZONE = "UTC"

_PRIMITIVE: dict[str, pa.DataType] = {
    "BOOLEAN": pa.bool_(),
    "TINYINT": pa.int8(),
    "BYTE": pa.int8(),
    "SMALLINT": pa.int16(),
    "SHORT": pa.int16(),
    "INT": pa.int32(),
    "INTEGER": pa.int32(),
    "BIGINT": pa.int64(),
    "LONG": pa.int64(),
    "FLOAT": pa.float32(),
    "REAL": pa.float32(),
    "DOUBLE": pa.float64(),
    "DECIMAL": pa.decimal128(10, 0),
    "STRING": pa.string(),
    "BINARY": pa.binary(),
    "DATE": pa.date32(),
    "TIMESTAMP": pa.timestamp("us", tz=TIMESTAMP_ZONE),
    "TIMESTAMP_NTZ": pa.timestamp("us"),
}


def arrow_type(type_text: str) -> pa.DataType:
    """The Arrow type of a column type as the log spells it (`core.schema.types.normalize_type`)."""
    text = type_text.strip()
    upper = text.upper()
    if upper in _PRIMITIVE:
        return _PRIMITIVE[upper]
    if upper.startswith("DECIMAL("):
        precision, scale = (int(part) for part in upper[len("DECIMAL(") : -1].split(","))
        return pa.decimal128(precision, scale)
    if upper.startswith(("CHAR(", "VARCHAR(")):
        return pa.string()
    if upper.startswith("ARRAY<"):
        return pa.list_(pa.field("element", arrow_type(inner_type(text)), nullable=True))
    if upper.startswith("MAP<"):
        key, value = split_top_level(inner_type(text))
        return pa.map_(pa.field("key", arrow_type(key), nullable=False), pa.field("value", arrow_type(value)))
    if upper.startswith("STRUCT<"):
        fields = []
        for part in split_top_level(inner_type(text)):
            name, _, field_type = part.partition(":")
            fields.append(pa.field(name.strip().strip("`"), arrow_type(field_type), nullable=True))
        return pa.struct(fields)
    raise InvalidArgumentError(f"column type {type_text!r} has no Arrow type; the table's metadata is damaged")


def read_schema(meta: TableMetadata) -> pa.Schema:
    """The schema of a table's rows as a reader gets them: every column nullable, as Spark's file sources
    read them (NOT NULL is enforced where rows are written; a read never fails on what files hold)."""
    return pa.schema([pa.field(c.name, arrow_type(c.type), nullable=True) for c in meta.columns])


__all__ = ["TIMESTAMP_ZONE", "arrow_type", "read_schema"]
