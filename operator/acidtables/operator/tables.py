"""What an AcidTable asks of the catalog: create or adopt the table, add columns, drop it on deletion.

Plain functions of a Catalog and a spec, with no Kubernetes in them: the kopf handlers stay thin and
these are tested against etcd alone. Every change goes through core's commit path, so concurrent
writers see a MetadataChanged exactly as the conflict rules say.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from acidtables.core import (
    AcidTablesError,
    Catalog,
    ProtocolChangedException,
    Table,
    TableNotFoundError,
)

from .definition import TableDefinition, catalog_name

logger = logging.getLogger(__name__)


class DefinitionMismatch(AcidTablesError):
    """The catalog already has a table of this name with another definition; it is never overwritten."""

    def __init__(self, name: str, differences: list[str]) -> None:
        super().__init__(f"{name} exists with another definition: " + "; ".join(differences))
        self.differences = differences


@dataclass(frozen=True)
class Reconciled:
    table: Table
    #: "created", "adopted" (an existing table with this definition) or "unchanged"
    outcome: str
    added_columns: list[str] = field(default_factory=list)
    changed_properties: list[str] = field(default_factory=list)


def reconcile(
    catalog: Catalog, namespace: str, name: str, spec: Mapping[str, Any], *, known_id: str | None
) -> Reconciled:
    """Make the catalog hold the table `spec` defines. `known_id` is the table id this resource
    already manages (from its status), so a table dropped and recreated behind its back is noticed."""
    definition = TableDefinition.from_spec(spec)
    full = catalog_name(namespace, name)
    try:
        table = catalog.table(full)
    except TableNotFoundError:
        try:
            table = catalog.create_table(full, list(definition.columns), **definition.create_options())
            logger.info("created table %s for AcidTable %s/%s", full, namespace, name)
            return Reconciled(table, "created")
        except ProtocolChangedException:  # created concurrently (another operator replica): adopt it
            table = catalog.table(full)
    differences = definition.differences(table.metadata, location=table.location)
    if differences:
        raise DefinitionMismatch(full, differences)
    added = definition.added_columns(table.metadata)
    properties = definition.changed_properties(table.metadata)
    if added or properties:
        # one metadata commit, so writers that overlap it fail with MetadataChanged as the rules say
        catalog.alter_table(full, add_columns=added or None, properties=properties or None)
        logger.info("altered %s: columns %s, properties %s", full, [c.name for c in added], sorted(properties))
        return Reconciled(catalog.table(full), "altered", [c.name for c in added], sorted(properties))
    return Reconciled(table, "unchanged" if known_id == table.table_id else "adopted")


def release(catalog: Catalog, namespace: str, name: str, *, deletion_policy: str, managed_id: str | None) -> str:
    """On deletion of the resource: `Retain` leaves the table (files and etcd keys) for a later
    AcidTable to adopt; `Delete` drops it with every file it wrote, but only the table the resource
    managed (`managed_id`, its status.tableId): a table of that name it never created or adopted (its
    definition did not match, its spec was invalid) or one dropped and made again since is someone
    else's, and is left alone. Returns what was done, in words."""
    full = catalog_name(namespace, name)
    if deletion_policy != "Delete":
        return f"table {full} retained (deletionPolicy Retain)"
    try:
        table_id = catalog.table(full).table_id
    except TableNotFoundError:
        return f"table {full} was already gone"
    if managed_id != table_id:
        managed = "never managed a table" if managed_id is None else f"managed table id {managed_id}"
        return (
            f"table {full} kept: this AcidTable {managed}, and the table of that name is table id {table_id}, "
            "so deletionPolicy Delete does not drop it"
        )
    try:
        report = catalog.drop_table(full, delete_data=True)
    except TableNotFoundError:
        return f"table {full} was already gone"
    kept = len(report.kept) if report is not None else 0
    deleted = len(report.deleted) if report is not None else 0
    return f"table {full} dropped: {deleted} files deleted" + (f", {kept} not written by it kept" if kept else "")
