"""acidtables' log in Delta Lake's terms: the actions of one commit, and a checkpoint of one snapshot.

Everything here is a pure function of the commit records and snapshots, so any process that mirrors a
version writes the same bytes, and two writers racing on one version are harmless. Names and encodings
follow the Delta protocol (PROTOCOL.md): `protocol`, `metaData` (the schema as Delta's JSON), `add` and
`remove` with partition values as strings and per-file statistics, `commitInfo`; paths relative to the
table root and URI-encoded, as Delta readers decode them.

The protocol names a writer feature no Delta writer knows (`acidtablesCommits`), so delta-rs, Spark's
Delta writer and the rest refuse to commit to the mirror: their commit would bypass etcd.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote

import pyarrow as pa

from acidtables.core.log.operations import Operation
from acidtables.core.log.records import CommitRecord, DataFile, TableMetadata
from acidtables.core.log.snapshot import Snapshot
from acidtables.core.schema.types import inner_type, split_top_level

#: the writer feature that keeps Delta writers out (they refuse a table naming a feature they lack)
WRITER_FEATURE = "acidtablesCommits"
ENGINE = "acidtables"

_PRIMITIVE = {
    "BOOLEAN": "boolean",
    "TINYINT": "byte",
    "BYTE": "byte",
    "SMALLINT": "short",
    "SHORT": "short",
    "INT": "integer",
    "INTEGER": "integer",
    "BIGINT": "long",
    "LONG": "long",
    "FLOAT": "float",
    "REAL": "float",
    "DOUBLE": "double",
    "DECIMAL": "decimal(10,0)",
    "STRING": "string",
    "BINARY": "binary",
    "DATE": "date",
    "TIMESTAMP": "timestamp",
    "TIMESTAMP_NTZ": "timestamp_ntz",
}
#: Delta's operation names, as its history shows them
_OPERATIONS = {
    Operation.CREATE_TABLE: "CREATE TABLE",
    Operation.INSERT_INTO: "WRITE",
    Operation.INSERT_OVERWRITE: "WRITE",
    Operation.TRUNCATE: "DELETE",
    Operation.UPDATE: "UPDATE",
    Operation.DELETE: "DELETE",
    Operation.MERGE: "MERGE",
    Operation.MINOR_COMPACT: "OPTIMIZE",
    Operation.MAJOR_COMPACT: "OPTIMIZE",
    Operation.CLUSTER: "OPTIMIZE",
    Operation.ALTER: "SET TBLPROPERTIES",
    Operation.UPGRADE_PROTOCOL: "UPGRADE PROTOCOL",
    Operation.RESTORE: "RESTORE",
}
#: statistics Delta readers prune with: exact values of these column types only (timestamps, decimals
#: and nested types carry none in acidtables' log either)
_STATS_TYPES = frozenset({"long", "integer", "short", "byte", "double", "float", "string", "date", "boolean"})


def delta_type(type_text: str) -> Any:
    """A column type (the log's spelling) as Delta's schema JSON spells it."""
    upper = type_text.strip().upper()
    if upper in _PRIMITIVE:
        return _PRIMITIVE[upper]
    if upper.startswith("DECIMAL("):
        return "decimal" + upper[len("DECIMAL") :].replace(" ", "")
    if upper.startswith(("CHAR(", "VARCHAR(")):
        return "string"
    if upper.startswith("ARRAY<"):
        return {"type": "array", "elementType": delta_type(inner_type(type_text)), "containsNull": True}
    if upper.startswith("MAP<"):
        key, value = split_top_level(inner_type(type_text))
        return {"type": "map", "keyType": delta_type(key), "valueType": delta_type(value), "valueContainsNull": True}
    if upper.startswith("STRUCT<"):
        fields = []
        for part in split_top_level(inner_type(type_text)):
            name, _, field_type = part.partition(":")
            fields.append(_field(name.strip().strip("`"), field_type, nullable=True))
        return {"type": "struct", "fields": fields}
    raise ValueError(f"column type {type_text!r} has no Delta type")


def _field(name: str, type_text: str, *, nullable: bool) -> dict[str, Any]:
    return {"name": name, "type": delta_type(type_text), "nullable": nullable, "metadata": {}}


def schema_string(meta: TableMetadata) -> str:
    fields = [_field(c.name, c.type, nullable=c.nullable) for c in meta.columns]
    return json.dumps({"type": "struct", "fields": fields}, separators=(",", ":"))


def protocol_action(meta: TableMetadata) -> dict[str, Any]:
    """Reader version 1 (3 with TIMESTAMP_NTZ, which Delta names as a reader feature); writer version 7
    with the feature that keeps Delta writers out."""
    ntz = any("TIMESTAMP_NTZ" in c.type.upper() for c in meta.columns)
    protocol: dict[str, Any] = {"minReaderVersion": 3 if ntz else 1, "minWriterVersion": 7}
    if ntz:
        protocol["readerFeatures"] = ["timestampNtz"]
    protocol["writerFeatures"] = [WRITER_FEATURE, *(["timestampNtz"] if ntz else [])]
    return {"protocol": protocol}


def metadata_action(meta: TableMetadata) -> dict[str, Any]:
    return {
        "metaData": {
            "id": meta.table_id,
            "name": meta.name,
            "format": {"provider": "parquet", "options": {}},
            "schemaString": schema_string(meta),
            "partitionColumns": list(meta.partition_by),
            "configuration": {},
            "createdTime": meta.created_at // 1000,
        }
    }


def delta_path(path: str) -> str:
    """A file's path as a Delta log names it: relative to the table root (or absolute), URI-encoded."""
    if "://" in path:
        scheme, _, rest = path.partition("://")
        return f"{scheme}://{quote(rest, safe='/=')}"
    if path.startswith("/"):
        return "file://" + quote(path, safe="/=")
    return quote(path, safe="/=")


def partition_values(file: DataFile) -> dict[str, str | None]:
    """Delta keeps partition values as strings: the log's value as its directory spells it."""
    values: dict[str, str | None] = {}
    for name, value in file.partition.items():
        if value is None:
            values[name] = None
        elif isinstance(value, bool):
            values[name] = "true" if value else "false"
        else:
            values[name] = str(value)
    return values


def _stats(meta: TableMetadata, file: DataFile) -> str:
    types = {c.name: delta_type(c.type) for c in meta.columns if c.name not in meta.partition_by}
    minimum: dict[str, Any] = {}
    maximum: dict[str, Any] = {}
    nulls: dict[str, int] = {}
    for name, stats in file.stats.items():
        if types.get(name) not in _STATS_TYPES:
            continue
        if stats.null_count is not None:
            nulls[name] = stats.null_count
        bounds = (stats.min, stats.max)
        if any(v is None or (isinstance(v, float) and not math.isfinite(v)) for v in bounds):
            continue  # no bound rather than a wrong one (JSON has no NaN or Infinity)
        minimum[name], maximum[name] = bounds
    document = {"numRecords": file.rows, "minValues": minimum, "maxValues": maximum, "nullCount": nulls}
    return json.dumps(document, separators=(",", ":"), allow_nan=False)


def add_action(meta: TableMetadata, file: DataFile, at_ms: int) -> dict[str, Any]:
    return {
        "add": {
            "path": delta_path(file.path),
            "partitionValues": partition_values(file),
            "size": file.size_bytes,
            "modificationTime": at_ms,
            "dataChange": file.data_change,
            "stats": _stats(meta, file),
        }
    }


def remove_action(file: DataFile, at_ms: int, *, data_change: bool) -> dict[str, Any]:
    return {
        "remove": {
            "path": delta_path(file.path),
            "deletionTimestamp": at_ms,
            "dataChange": data_change,
            "extendedFileMetadata": True,
            "partitionValues": partition_values(file),
            "size": file.size_bytes,
        }
    }


def commit_actions(record: CommitRecord, meta: TableMetadata, *, metadata_changed: bool) -> list[dict[str, Any]]:
    """The actions of Delta version `record.version`: commitInfo first, then protocol and metaData when
    the table's definition changed (always at version 0), then removes and adds. `meta`: the table's
    metadata as of this version."""
    at_ms = record.committed_at // 1000
    data_change = record.operation not in (Operation.MINOR_COMPACT, Operation.MAJOR_COMPACT, Operation.CLUSTER)
    info: dict[str, Any] = {
        "timestamp": at_ms,
        "operation": _OPERATIONS.get(record.operation, record.operation.value.upper()),
        "operationParameters": {"acidtablesOperation": record.operation.value},
        "isBlindAppend": record.blind_append,
        "engineInfo": ENGINE,
        "txnId": record.txn_id,
    }
    if record.read_version >= 0:  # Delta's readVersion is unsigned: a CREATE TABLE read none
        info["readVersion"] = record.read_version
    if record.metrics:
        info["operationMetrics"] = {k: str(v) for k, v in record.metrics.items()}
    actions: list[dict[str, Any]] = [{"commitInfo": info}]
    if metadata_changed:
        actions += [protocol_action(meta), metadata_action(meta)]
    # a file removed and added back in one commit stays: Delta readers let a remove in the same version
    # win over the add, so only the add is written
    added = {f.path for f in record.adds}
    actions += [remove_action(f, at_ms, data_change=data_change) for f in record.removes if f.path not in added]
    actions += [add_action(meta, f, at_ms) for f in record.adds]
    return actions


def encode(actions: Iterable[Mapping[str, Any]]) -> bytes:
    return "".join(json.dumps(a, separators=(",", ":"), ensure_ascii=False) + "\n" for a in actions).encode()


# --- checkpoints ---------------------------------------------------------------------------------------

_STRING_MAP = pa.map_(pa.string(), pa.string())
CHECKPOINT_SCHEMA = pa.schema(
    [
        pa.field(
            "protocol",
            pa.struct(
                [
                    ("minReaderVersion", pa.int32()),
                    ("minWriterVersion", pa.int32()),
                    ("readerFeatures", pa.list_(pa.string())),
                    ("writerFeatures", pa.list_(pa.string())),
                ]
            ),
        ),
        pa.field(
            "metaData",
            pa.struct(
                [
                    ("id", pa.string()),
                    ("name", pa.string()),
                    ("description", pa.string()),
                    ("format", pa.struct([("provider", pa.string()), ("options", _STRING_MAP)])),
                    ("schemaString", pa.string()),
                    ("partitionColumns", pa.list_(pa.string())),
                    ("configuration", _STRING_MAP),
                    ("createdTime", pa.int64()),
                ]
            ),
        ),
        pa.field(
            "add",
            pa.struct(
                [
                    ("path", pa.string()),
                    ("partitionValues", _STRING_MAP),
                    ("size", pa.int64()),
                    ("modificationTime", pa.int64()),
                    ("dataChange", pa.bool_()),
                    ("stats", pa.string()),
                    ("tags", _STRING_MAP),
                ]
            ),
        ),
        pa.field(
            "remove",
            pa.struct(
                [
                    ("path", pa.string()),
                    ("deletionTimestamp", pa.int64()),
                    ("dataChange", pa.bool_()),
                    ("extendedFileMetadata", pa.bool_()),
                    ("partitionValues", _STRING_MAP),
                    ("size", pa.int64()),
                ]
            ),
        ),
        pa.field("txn", pa.struct([("appId", pa.string()), ("version", pa.int64()), ("lastUpdated", pa.int64())])),
    ]
)


def _map(values: Mapping[str, Any]) -> list[tuple[str, Any]]:
    return list(values.items())


def checkpoint_rows(snapshot: Snapshot) -> pa.Table:
    """A classic single-file Delta checkpoint of `snapshot`: its protocol, metaData and one add per live
    file (removes are not needed: a checkpoint older than every retained version is never read back)."""
    meta = snapshot.metadata
    protocol = protocol_action(meta)["protocol"]
    metadata = metadata_action(meta)["metaData"]
    rows: list[dict[str, Any]] = [
        {"protocol": {**protocol, "readerFeatures": protocol.get("readerFeatures")}},
        {
            "metaData": {
                **metadata,
                "description": None,
                "format": {"provider": "parquet", "options": []},
                "configuration": [],
            }
        },
    ]
    at_ms = snapshot.committed_at // 1000
    for file in snapshot.files:
        add = add_action(meta, file, at_ms)["add"]
        rows.append(
            {"add": {**add, "partitionValues": _map(add["partitionValues"]), "dataChange": False, "tags": None}}
        )
    return pa.Table.from_pylist(rows, schema=CHECKPOINT_SCHEMA)


__all__ = [
    "CHECKPOINT_SCHEMA",
    "ENGINE",
    "WRITER_FEATURE",
    "add_action",
    "checkpoint_rows",
    "commit_actions",
    "delta_path",
    "delta_type",
    "encode",
    "metadata_action",
    "protocol_action",
    "remove_action",
    "schema_string",
]
