"""An AcidTable's spec read as a table definition, and compared with the table etcd has.

Kubernetes names allow `-` where table names allow `_`, so a resource `sales/orders-v2` is the table
`sales.orders_v2`; names never hold `_` in Kubernetes, so the mapping cannot make two resources one
table. The CRD refuses most bad specs already; what only core can judge (a column type, a location)
comes back as an InvalidArgumentError with core's own message.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from acidtables.core import (
    CONFLICT_DETECTION_PROPERTY,
    MIRROR_PROPERTY,
    Column,
    InvalidArgumentError,
    TableMetadata,
    parse_schema,
)

#: the table property that holds an AcidTable's compaction settings (JSON)
COMPACTION_PROPERTY = "acidtables.compaction"
#: core's defaults, spelled out so a spec that leaves them out compares equal to the table it made
DEFAULT_POLICY_WITH_KEY = "maxcompute"
DEFAULT_POLICY = "delta"


def catalog_name(namespace: str, name: str) -> str:
    """The catalog name of the AcidTable `namespace/name`: `<namespace>.<name>`, `-` read as `_`."""
    return f"{namespace.replace('-', '_')}.{name.replace('-', '_')}"


def resource_name(table: str) -> str:
    """The AcidTable a CompactionJob's `spec.table` names: its name as the resource spells it (`-`), given
    either way (`orders-v2` or, as the catalog spells it, `orders_v2`)."""
    return table.replace("_", "-")


def same_table(a: str, b: str) -> bool:
    """Whether two spellings of a table in one namespace (`orders-v2`, `orders_v2`) name the same table."""
    return a.replace("-", "_") == b.replace("-", "_")


@dataclass(frozen=True)
class TableDefinition:
    columns: tuple[Column, ...]
    partition_by: tuple[str, ...]
    primary_key: tuple[str, ...]
    location: str | None
    conflict_policy: str
    isolation_level: str | None
    row_level_concurrency: bool
    #: the spec's compaction, conflict detection and mirror settings, kept with the table (a change is a
    #: metadata commit)
    properties: Mapping[str, str]

    @staticmethod
    def from_spec(spec: Mapping[str, Any]) -> TableDefinition:
        raw = spec.get("schema") or []
        columns = parse_schema(
            [Column(str(c["name"]), str(c["type"]), bool(c.get("nullable", True))) for c in raw], method="AcidTable"
        )
        primary_key = tuple(spec.get("primaryKey") or ())
        # key columns are NOT NULL whatever the spec says, as create_table makes them
        keys = {k.lower() for k in primary_key}
        columns = tuple(Column(c.name, c.type, c.nullable and c.name.lower() not in keys) for c in columns)
        policy = spec.get("conflictPolicy") or (DEFAULT_POLICY_WITH_KEY if primary_key else DEFAULT_POLICY)
        level = spec.get("isolationLevel") or ("WriteSerializable" if policy == "delta" else None)
        return TableDefinition(
            columns=columns,
            partition_by=tuple(spec.get("partitionBy") or ()),
            primary_key=primary_key,
            location=spec.get("location") or None,
            conflict_policy=policy,
            isolation_level=level,
            row_level_concurrency=bool(spec.get("rowLevelConcurrency", False)),
            properties={
                COMPACTION_PROPERTY: json.dumps(spec.get("compaction") or {}, sort_keys=True),
                CONFLICT_DETECTION_PROPERTY: str(spec.get("conflictDetection") or "partitions"),
                # spec.mirror: [delta] turns the Delta log mirror on; [] or no field turns it off
                MIRROR_PROPERTY: ",".join(str(f) for f in spec.get("mirror") or ()),
            },
        )

    def create_options(self) -> dict[str, Any]:
        """`Catalog.create_table` keyword arguments for this definition."""
        return {
            "partition_by": list(self.partition_by),
            "primary_key": list(self.primary_key),
            "location": self.location,
            "conflict_policy": self.conflict_policy,
            "isolation_level": self.isolation_level,
            "row_level_concurrency": self.row_level_concurrency,
            "properties": dict(self.properties),
        }

    def differences(self, meta: TableMetadata, *, location: str) -> list[str]:
        """What differs from the table etcd has, in words; columns the spec adds at the end are not a
        difference but `added_columns` (the one change an AcidTable may make)."""
        out = []
        existing = [(c.name.lower(), c.type, c.nullable) for c in meta.columns]
        wanted = [(c.name.lower(), c.type, c.nullable) for c in self.columns]
        if wanted[: len(existing)] != existing:
            out.append(f"schema: the table has ({meta.schema_ddl}), the spec says ({_ddl(self.columns)})")
        for field, have, want in (
            ("partitionBy", list(meta.partition_by), list(self.partition_by)),
            ("primaryKey", list(meta.primary_key), list(self.primary_key)),
            ("conflictPolicy", meta.conflict_policy.value, self.conflict_policy),
            ("isolationLevel", meta.isolation_level.value if meta.isolation_level else None, self.isolation_level),
            ("rowLevelConcurrency", meta.row_level_concurrency, self.row_level_concurrency),
        ):
            if [str(x).lower() for x in _listed(have)] != [str(x).lower() for x in _listed(want)]:
                out.append(f"{field}: the table has {have!r}, the spec says {want!r}")
        if self.location is not None and self.location.rstrip("/") != location.rstrip("/"):
            out.append(f"location: the table is at {location}, the spec says {self.location}")
        return out

    def changed_properties(self, meta: TableMetadata) -> dict[str, str]:
        """Properties the spec sets to other values than the table has (an ALTER ... SET TBLPROPERTIES)."""
        # no setting means the default: empty compaction settings, partition-level conflict detection
        have = {
            COMPACTION_PROPERTY: "{}",
            CONFLICT_DETECTION_PROPERTY: "partitions",
            MIRROR_PROPERTY: "",
            **meta.properties,
        }
        return {k: v for k, v in self.properties.items() if have.get(k) != v}

    def added_columns(self, meta: TableMetadata) -> list[Column]:
        """Columns the spec appends to the table's schema (an ALTER ... ADD COLUMNS)."""
        known = {c.name.lower() for c in meta.columns}
        return [c for c in self.columns[len(meta.columns) :] if c.name.lower() not in known]


def _listed(value: object) -> Sequence[object]:
    return value if isinstance(value, list) else [value]


def _ddl(columns: Sequence[Column]) -> str:
    return ", ".join(f"{c.name} {c.type}{'' if c.nullable else ' NOT NULL'}" for c in columns)


def check_spec(spec: Mapping[str, Any]) -> TableDefinition:
    """The definition, or InvalidArgumentError naming what core refuses in the spec."""
    if not isinstance(spec, Mapping):
        raise InvalidArgumentError("AcidTable: spec must be an object")
    return TableDefinition.from_spec(spec)
