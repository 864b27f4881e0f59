"""Table schemas as users write them: `"id BIGINT NOT NULL, dt STRING"`, or (name, type) pairs.

Checked where a schema is received (create_table, alter_table, merge_schema=True), so the log only
ever holds plain identifiers and the types `types.normalize_type` accepts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from acidtables.core.errors import InvalidArgumentError
from acidtables.core.log.operations import Policy
from acidtables.core.log.records import CONFLICT_DETECTION_MODES, CONFLICT_DETECTION_PROPERTY, Column
from acidtables.core.names import IDENTIFIER
from acidtables.core.schema.types import normalize_type, split_top_level

#: names the library gives its own columns and staging directories (merge-on-read's _acid_op/_acid_seq,
#: the _acid_txn=/_acid_write= levels a reader's partition discovery sees)
RESERVED_PREFIX = "_acid_"


def parse_schema(schema: str | Sequence[Column] | Sequence[tuple[str, str]], *, method: str) -> tuple[Column, ...]:
    """Accept `"id BIGINT, dt STRING"` or pairs; nested types keep their commas (`DECIMAL(10,2)`)."""
    if isinstance(schema, str):
        columns = []
        for part in split_top_level(schema):
            words = part.strip().split(None, 1)
            if len(words) != 2:
                raise InvalidArgumentError(
                    f"{method}(): schema entry {part.strip()!r} must be '<name> <TYPE>', "
                    f'as in schema="id BIGINT, dt STRING"'
                )
            name, type_ = words
            nullable = True
            if type_.upper().endswith(" NOT NULL"):
                type_, nullable = type_[: -len(" NOT NULL")], False
            columns.append(Column(name.strip("`"), type_.strip(), nullable))
    else:
        columns = [c if isinstance(c, Column) else Column(c[0], c[1]) for c in schema]
    if not columns:
        raise InvalidArgumentError(f"{method}(): schema is empty; give at least one column")
    seen: set[str] = set()
    for column in columns:
        if not IDENTIFIER.match(column.name):
            raise InvalidArgumentError(f"{method}(): column name {column.name!r} is not a plain identifier")
        if column.name.lower().startswith(RESERVED_PREFIX):
            raise InvalidArgumentError(
                f"{method}(): column name {column.name!r} starts with {RESERVED_PREFIX!r}, which acidtables keeps for "
                "its own columns"
            )
        if column.name.lower() in seen:
            raise InvalidArgumentError(f"{method}(): column {column.name!r} appears twice in the schema")
        seen.add(column.name.lower())
    return tuple(replace(c, type=normalize_type(c.type, column=c.name, method=method)) for c in columns)


def check_properties(properties: Mapping[str, str], policy: Policy, *, method: str) -> dict[str, str]:
    """Table properties as strings; the ones acidtables itself reads must hold a value it knows."""
    checked = {str(k): str(v) for k, v in properties.items()}
    mode = checked.get(CONFLICT_DETECTION_PROPERTY)
    if mode is not None:
        if mode not in CONFLICT_DETECTION_MODES:
            raise InvalidArgumentError(
                f"{method}(): {CONFLICT_DETECTION_PROPERTY}={mode!r}; use one of {', '.join(CONFLICT_DETECTION_MODES)}"
            )
        if mode != "partitions" and policy is not Policy.DELTA:
            raise InvalidArgumentError(
                f"{method}(): {CONFLICT_DETECTION_PROPERTY}={mode!r} applies to the delta policy only (§13.1 "
                f"rule 4); this table uses {policy.value}"
            )
    return checked
