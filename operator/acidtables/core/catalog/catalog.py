"""The catalog: names -> tables, and the entry point users start from (design §7).

`Catalog.connect()` reads `ACIDTABLES_*` settings (pods, clusters); `Catalog.local()` runs an embedded
etcd and a warehouse under the user's data directory (development, the demo). Either way a table is
created with version 0 (its definition) and the catalog entry in one etcd transaction, so a table either
fully exists or not at all.
"""

from __future__ import annotations

import atexit
import json
import logging
import math
import os
import uuid
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypedDict, Unpack

from acidtables.core.catalog.multi_table import MultiTableTransaction
from acidtables.core.catalog.table import Table, TimeLike
from acidtables.core.coordination.coordinator import Coordinator
from acidtables.core.coordination.waiting import wait_for
from acidtables.core.errors import (
    CorruptMetadataError,
    InvalidArgumentError,
    ProtocolChangedException,
    TableAlreadyExistsError,
    TableNotFoundError,
)
from acidtables.core.log.operations import IsolationLevel, OpClass, Operation, Policy
from acidtables.core.log.records import Column, CommitInfo, CommitRecord, Head, Protocol, TableMetadata, seal_entry
from acidtables.core.log.services import Services
from acidtables.core.log.snapshot import Snapshot
from acidtables.core.maintenance.maintenance import DropReport, delete_table_data
from acidtables.core.mirror import check_mirror
from acidtables.core.names import IDENTIFIER, split_name
from acidtables.core.schema.ddl import check_properties, parse_schema
from acidtables.core.settings import CommitSettings, EtcdSettings, Settings
from acidtables.core.storage.locations import Owner, check_location_is_free, check_owner, claim, release
from acidtables.core.storage.storage import GLOB_CHARACTERS, Storage, normalize_location

logger = logging.getLogger(__name__)

#: catalogs not yet closed: the interpreter's exit closes them (see _close_open_catalogs)
_open_catalogs: weakref.WeakSet[Catalog] = weakref.WeakSet()


@atexit.register
def _close_open_catalogs() -> None:
    """Close the catalogs a script left open while the interpreter is still whole: their threads and
    gRPC channels would otherwise meet its finalization, where gRPC's native threads can abort the
    process after all its work succeeded (SIGABRT, exit 134)."""
    for catalog in list(_open_catalogs):
        try:
            catalog.close()
        except Exception:  # the process is ending: what could not be closed ends with it
            logger.debug("closing a catalog at exit failed", exc_info=True)


#: file under a local data directory naming the embedded etcd that serves it (Catalog.local, `acidtables etcd`)
LOCAL_ETCD_MARKER = "etcd-endpoint.json"


def user_data_dir() -> Path:
    """$ACIDTABLES_HOME, else the XDG data directory (~/.local/share/acidtables)."""
    home = os.environ.get("ACIDTABLES_HOME")
    if home:
        return Path(home)
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "acidtables"


class TableOptions(TypedDict, total=False):
    """What `create_table` takes besides the name and schema (`prepare_create_table` documents each)."""

    partition_by: Sequence[str]
    primary_key: Sequence[str]
    location: str | None
    conflict_policy: str | None
    isolation_level: str | None
    row_level_concurrency: bool
    properties: Mapping[str, str] | None


@dataclass
class PreparedCreate:
    """A table checked and its location claimed, not yet in the catalog (`Catalog.prepare_create_table`)."""

    services: Services
    namespace: str
    short: str
    entry: dict[str, Any]
    metadata: TableMetadata
    record: CommitRecord
    storage: Storage
    owner: Owner
    done: bool = False

    def commit(self) -> Table:
        """Put the catalog entry and version 0 in one etcd transaction that requires the name be free."""
        if self.done:
            raise InvalidArgumentError(f"create_table(): {self.metadata.name} was already committed or aborted")
        self.done = True
        metadata, coordinator = self.metadata, self.services.coordinator
        try:
            created = coordinator.create_table(
                self.namespace,
                self.short,
                self.entry,
                metadata.table_id,
                seal_entry(self.record.to_json()),
                Head(0, None, self.record.txn_id).to_json(),
            )
        except BaseException:
            release(self.storage, self.owner)
            raise
        if not created:
            release(self.storage, self.owner)
            # seed 004 / §13.1 rule 1: two writers creating the same table at once
            winner = coordinator.get_catalog_entry(self.namespace, self.short) or {}
            raise ProtocolChangedException(
                table=metadata.name,
                operation="CREATE TABLE",
                read_version=-1,
                winning_version=0,
                winning_operation="CREATE TABLE",
                detail=f"another writer created it concurrently (table id {winner.get('table_id', '?')})",
            )
        logger.info("created %s (policy %s) at %s", metadata.name, metadata.conflict_policy.value, metadata.location)
        return Table(self.services, metadata.table_id, metadata.name, metadata.location)

    def abort(self) -> None:
        """Give the claimed location back; nothing was written to etcd."""
        if not self.done:
            self.done = True
            release(self.storage, self.owner)


class Catalog:
    """Tables by name. Create one per process and close it (or use it as a context manager)."""

    def __init__(self, settings: Settings, *, services: Services | None = None, owned: Any = None) -> None:
        self.settings = settings
        self.services = services or Services(settings, Coordinator(settings.etcd))
        self._owned = owned  # an embedded etcd this catalog started, stopped on close()
        _open_catalogs.add(self)

    # --- construction --------------------------------------------------------------------------------

    @classmethod
    def connect(cls, env: Mapping[str, str] | None = None) -> Catalog:
        """Connect with ACIDTABLES_ETCD_ENDPOINTS, ACIDTABLES_WAREHOUSE and the other ACIDTABLES_* settings."""
        return cls(Settings.from_env(env))

    @classmethod
    def local(cls, path: str | Path | None = None) -> Catalog:
        """An embedded etcd and a local warehouse under `path` (default: the user's data directory).

        Reuses an embedded etcd another process already runs for the same directory; otherwise starts
        one that this catalog stops on close().
        """
        from acidtables.core.coordination.embedded import EmbeddedEtcd

        root = Path(path) if path is not None else user_data_dir()
        try:
            root.mkdir(parents=True, exist_ok=True)
            warehouse = root / "warehouse"
            warehouse.mkdir(exist_ok=True)
        except (FileExistsError, NotADirectoryError):  # the path, or a part of it, is a file
            raise InvalidArgumentError(
                f"Catalog.local(): {root} is not a directory; give a directory (created if missing) for the "
                "embedded etcd and the warehouse"
            ) from None
        marker = root / LOCAL_ETCD_MARKER
        owned = None
        endpoint = None
        if marker.exists():
            try:
                endpoint = json.loads(marker.read_text())["endpoint"]
                probe = Coordinator(EtcdSettings((endpoint,), unavailable_timeout_seconds=1.0))
                try:
                    probe.ping()
                finally:
                    probe.close()  # its channel must not outlive the check
            except Exception:  # stale marker: the process that started it is gone
                endpoint = None
        if endpoint is None:
            owned = EmbeddedEtcd(root / "etcd").start()
            endpoint = owned.endpoint
            marker.write_text(json.dumps({"endpoint": endpoint, "pid": owned.pid}))
            logger.info("started an embedded etcd at %s (data in %s)", endpoint, root / "etcd")
        settings = Settings(etcd=EtcdSettings((endpoint,)), warehouse=str(warehouse), commit=CommitSettings.from_env())
        return cls(settings, owned=owned)

    def close(self) -> None:
        """Finish the checkpoints and archiving this process's commits asked for, then end every thread and
        channel the catalog started and let go of etcd (and stop the embedded etcd it started)."""
        _open_catalogs.discard(self)
        if not self.services.coordinator.closed and not self.services.flush():
            logger.warning("closing with checkpoints or archiving still running; readers replay the log instead")
        self.services.close()
        self.services.coordinator.close()
        if self._owned is not None:
            self._owned.stop()
            self._owned = None

    def __enter__(self) -> Catalog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- tables --------------------------------------------------------------------------------------

    def create_table(
        self, name: str, schema: str | Sequence[Column] | Sequence[tuple[str, str]], **options: Unpack[TableOptions]
    ) -> Table:
        """Create a table at version 0. The conflict policy is fixed from now on (conflict-rules D-01):
        default `maxcompute` with a primary key (which it requires), `delta` + WriteSerializable without.
        The options are `prepare_create_table`'s."""
        unknown = sorted(set(options) - set(TableOptions.__annotations__))
        if unknown:
            raise InvalidArgumentError(
                f"create_table(): unknown option {', '.join(unknown)}; the options are "
                f"{', '.join(TableOptions.__annotations__)}"
            )
        return self.prepare_create_table(name, schema, **options).commit()

    def prepare_create_table(
        self,
        name: str,
        schema: str | Sequence[Column] | Sequence[tuple[str, str]],
        *,
        partition_by: Sequence[str] = (),
        primary_key: Sequence[str] = (),
        location: str | None = None,
        conflict_policy: str | None = None,
        isolation_level: str | None = None,
        row_level_concurrency: bool = False,
        properties: Mapping[str, str] | None = None,
    ) -> PreparedCreate:
        """`create_table` in two phases, like a transaction: every check, and the location claimed, now;
        the table exists once `commit()` wins the catalog entry (a concurrent create of the same name
        makes it raise ProtocolChangedException, seed 004). `abort()` gives the location back."""
        method = "create_table"
        namespace, short = split_name(name, method=method)
        columns = parse_schema(schema, method=method)
        names = {c.name.lower(): c.name for c in columns}
        partition_by = self._check_columns(partition_by, names, "partition_by")
        primary_key = self._check_columns(primary_key, names, "primary_key")
        # primary-key columns are NOT NULL whatever the DDL says (MaxCompute): a NULL key has no row to merge onto
        columns = tuple(replace(c, nullable=False) if c.name in primary_key else c for c in columns)
        policy = self._policy(conflict_policy, primary_key)
        level = self._isolation(policy, isolation_level)
        if row_level_concurrency and policy is not Policy.DELTA:
            raise InvalidArgumentError(
                f"{method}(): row_level_concurrency needs the delta policy (deletion vectors); this table uses "
                f"{policy.value}"
            )
        if not isinstance(row_level_concurrency, bool):
            raise InvalidArgumentError(f"{method}(): row_level_concurrency must be True or False")
        table_id = uuid.uuid4().hex
        now = self.services.clock()
        if location is not None and (not isinstance(location, str) or not location.strip()):
            raise InvalidArgumentError(f"{method}(): location must be a non-empty path or URI, found {location!r}")
        unprintable = sorted({repr(ch) for ch in location or "" if not ch.isprintable()})
        if unprintable:
            raise InvalidArgumentError(
                f"{method}(): location {location!r} contains {', '.join(unprintable)}, which no file system path "
                "may hold"
            )
        location = normalize_location(
            location or f"{self.settings.warehouse.rstrip('/')}/{namespace}/{short}-{table_id[:8]}"
        )
        globbing = sorted(GLOB_CHARACTERS & set(location))
        if globbing:
            raise InvalidArgumentError(
                f"{method}(): location {location!r} contains {' '.join(globbing)}, which readers such as Spark "
                "take for glob syntax; choose a location (or warehouse) without any of { } [ ] * ? \\"
            )
        metadata = TableMetadata(
            table_id=table_id,
            name=f"{namespace}.{short}",
            location=location,
            columns=columns,
            partition_by=partition_by,
            primary_key=primary_key,
            conflict_policy=policy,
            isolation_level=level,
            row_level_concurrency=row_level_concurrency,
            properties=check_properties(properties or {}, policy, method=method),
            created_at=now,
        )
        txn_id = uuid.uuid4().hex
        record = CommitRecord(
            txn_id=txn_id,
            version=0,
            read_version=-1,
            operation=Operation.CREATE_TABLE,
            op_class=OpClass.META,
            policy=policy,
            isolation_level=level,
            committed_at=now,
            metadata=metadata,
            protocol=Protocol(),
        )
        entry = {"table_id": table_id, "name": metadata.name, "location": location, "created_at": now}
        coordinator = self.services.coordinator
        if coordinator.get_catalog_entry(namespace, short) is not None:
            raise TableAlreadyExistsError(f"{method}(): {metadata.name} already exists; drop it first or pick a name")
        try:
            storage = self.services.storage(location)
            reuse = check_location_is_free(
                location,
                warehouse=self.settings.warehouse,
                tables=[(e["name"], e["location"]) for e in coordinator.list_catalog(None)],
                storage=storage,
                now_us=now,
                lease_seconds=self.settings.commit.lease_ttl_seconds,
            )
            check_mirror(metadata, storage, method=method)
            owner = Owner(table_id, metadata.name)
            claim(storage, owner, clear_dropped=reuse)
        except FileExistsError:
            raise InvalidArgumentError(
                f"{method}(): another table claimed location {location} at the same moment; pick another location"
            ) from None
        except OSError as exc:  # a name too long, a permission, a path through a file: the system's own reason
            raise InvalidArgumentError(f"{method}(): location {location} cannot hold a table: {exc}") from None
        return PreparedCreate(self.services, namespace, short, entry, metadata, record, storage, owner)

    @staticmethod
    def _check_columns(given: Sequence[str], names: Mapping[str, str], argument: str) -> tuple[str, ...]:
        if isinstance(given, str):
            given = [given]
        out = []
        for column in given:
            actual = names.get(str(column).lower())
            if actual is None:
                raise InvalidArgumentError(
                    f"create_table(): {argument} column {column!r} is not in the schema ({', '.join(names.values())})"
                )
            if actual in out:
                raise InvalidArgumentError(f"create_table(): {argument} names {actual!r} twice")
            out.append(actual)
        return tuple(out)

    @staticmethod
    def _policy(value: str | None, primary_key: tuple[str, ...]) -> Policy:
        if value is None:
            return Policy.MAXCOMPUTE if primary_key else Policy.DELTA
        try:
            policy = Policy(value)
        except ValueError:
            raise InvalidArgumentError(
                f"create_table(): conflict_policy={value!r}; use one of {', '.join(p.value for p in Policy)}"
            ) from None
        if policy is Policy.MAXCOMPUTE and not primary_key:
            raise InvalidArgumentError(
                "create_table(): conflict_policy 'maxcompute' is for primary-key tables; give primary_key=[...] "
                "or use 'maxcompute-transactional' or 'delta' for a table without one"
            )
        if policy is not Policy.MAXCOMPUTE and primary_key:
            raise InvalidArgumentError(
                f"create_table(): a primary-key table uses conflict_policy 'maxcompute' (merge-on-read); "
                f"{policy.value!r} is for tables without a primary key"
            )
        return policy

    @staticmethod
    def _isolation(policy: Policy, value: str | None) -> IsolationLevel | None:
        if policy is not Policy.DELTA:
            if value is not None:
                raise InvalidArgumentError(
                    f"create_table(): isolation_level applies to the delta policy only, not {policy.value!r}"
                )
            return None
        if value is None:
            return IsolationLevel.WRITE_SERIALIZABLE
        try:
            return IsolationLevel(value)
        except ValueError:
            raise InvalidArgumentError(
                f"create_table(): isolation_level={value!r}; use 'Serializable' or 'WriteSerializable'"
            ) from None

    def _entry(self, name: str, method: str) -> tuple[str, str, dict[str, Any]]:
        namespace, short = split_name(name, method=method)
        try:
            entry = self.services.coordinator.get_catalog_entry(namespace, short)
        except CorruptMetadataError as exc:
            raise CorruptMetadataError(
                f"{method}(): the catalog entry of {namespace}.{short} is damaged: {exc}",
                key=exc.key,
                table=f"{namespace}.{short}",
            ) from None
        if entry is None:
            raise TableNotFoundError(f"{method}(): no table {namespace}.{short}; list_tables() shows what exists")
        return namespace, short, entry

    def table(self, name: str) -> Table:
        _, _, entry = self._entry(name, "table")
        return Table(self.services, entry["table_id"], entry["name"], entry["location"])

    def transaction(self) -> MultiTableTransaction:
        """A transaction over several tables, committed all together or not at all (one etcd
        transaction compares every table's head): `with catalog.transaction() as tx:` then
        `tx.begin(table_name, operation)` per table; leaving the block commits, an exception aborts.
        docs/transactions.md."""
        return MultiTableTransaction(self.services, self.table)

    def snapshots(self, names: Sequence[str], *, timestamp: TimeLike | None = None) -> dict[str, Snapshot]:
        """Each named table pinned at one instant: the versions current at one etcd revision (or, with
        `timestamp`, each table's version as of that time, read at one revision too), so no
        multi-table commit is ever seen in part. By table name, in the order given."""
        if isinstance(names, str) or not isinstance(names, Sequence) or not names:
            raise InvalidArgumentError(f"snapshots(): expected a list of table names, found {names!r}")
        tables: dict[str, Table] = {}
        for name in names:
            table = self.table(name)
            tables.setdefault(table.name, table)
        heads, _ = self.services.coordinator.read_heads([t.table_id for t in tables.values()])
        pinned: dict[str, Snapshot] = {}
        for name, table in tables.items():
            head = heads[table.table_id]
            if head is None:
                raise TableNotFoundError(f"snapshots(): {name} was dropped")
            head_version = int(head.value["version"])
            version = head_version
            if timestamp is not None:
                # a multi-table commit gives every part one time version and lands whole, so capping each
                # table's answer at the head read at this revision keeps the tables consistent
                version = min(table.version_at(timestamp, method="snapshots"), head_version)
            pinned[name] = table.snapshot_at(version, head_version)
        return pinned

    def wait_for_table(self, name: str, timeout_seconds: float = 300.0) -> Table:
        """The table `name`, once it exists. For a job deployed together with its table (one `kubectl
        apply` of both): the operator creates the table in the catalog a moment after the job's pod may
        have started. TableNotFoundError naming the wait when it does not appear within `timeout_seconds`."""
        if (
            isinstance(timeout_seconds, bool)
            or not isinstance(timeout_seconds, int | float)
            or not math.isfinite(timeout_seconds)
            or timeout_seconds < 0
        ):
            raise InvalidArgumentError(
                f"wait_for_table(): timeout_seconds must be 0 or more and finite, found {timeout_seconds!r}"
            )
        found: list[Table] = []

        def exists() -> bool:
            try:
                found.append(self.table(name))
            except TableNotFoundError:
                return False
            return True

        try:
            wait_for(exists, timeout_seconds, interval_seconds=0.5)
        except TimeoutError:
            raise TableNotFoundError(
                f"wait_for_table(): no table {name} after {timeout_seconds:g} s; list_tables() shows what exists "
                "(an AcidTable becomes a table once the operator has reconciled it: kubectl describe acidtable)"
            ) from None
        return found[-1]

    def list_tables(self, namespace: str | None = None) -> list[str]:
        if namespace is not None and not IDENTIFIER.match(namespace):
            raise InvalidArgumentError(f"list_tables(): namespace {namespace!r} is not a plain identifier")
        return sorted(e["name"] for e in self.services.coordinator.list_catalog(namespace))

    def drop_table(self, name: str, *, delete_data: bool = False) -> DropReport | None:
        """Remove the table from the catalog; its files stay unless `delete_data=True`.

        With `delete_data=True` only what the table wrote goes: every file its log references or
        referenced, its staging directories and its own metadata; anything else under the location
        stays (listed in the report). The ownership marker is checked first: a location this table does
        not own raises LocationNotOwnedError and the table is not dropped. The location is free for a new
        table once the dropped table's transactions can no longer run (their leases have expired)."""
        if not isinstance(delete_data, bool):
            raise InvalidArgumentError(f"drop_table(): delete_data must be True or False, found {delete_data!r}")
        namespace, short, entry = self._entry(name, "drop_table")
        table_id, location = entry["table_id"], entry["location"]
        records: list[CommitRecord] = []
        if delete_data:
            check_owner(self.services.storage(location), table_id, f"{namespace}.{short}", "drop_table")
            records = Table(self.services, table_id, entry["name"], location).commits()
        # this process's background checkpoint or archiving of the table must not land in a location being
        # emptied, nor leave keys under a dropped prefix: dropped if queued, waited out if running (before
        # the drop, and after it for a commit that landed in between)
        self.services.settle(table_id, location)
        if not self.services.coordinator.drop_table(namespace, short, table_id):
            raise TableNotFoundError(f"drop_table(): {namespace}.{short} was dropped concurrently")
        self.services.settle(table_id, location)
        self.services.snapshots.forget(table_id)
        report = None
        if delete_data:
            report = delete_table_data(self.services, table_id, f"{namespace}.{short}", location, records)
        logger.info("dropped %s.%s (data %s)", namespace, short, "deleted" if delete_data else "kept")
        return report

    def alter_table(
        self,
        name: str,
        *,
        add_columns: str | Sequence[Column] | None = None,
        properties: Mapping[str, str] | None = None,
        isolation_level: str | None = None,
    ) -> CommitInfo:
        """Commit a metadata change. Every write that overlaps it fails with MetadataChangedException."""
        table = self.table(name)
        with table.begin(Operation.ALTER) as txn:
            txn.update_metadata(add_columns=add_columns, properties=properties, isolation_level=isolation_level)
            return txn.commit()
