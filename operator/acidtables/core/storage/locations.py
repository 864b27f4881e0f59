"""A location belongs to one table: the checks `create_table` makes before it claims one, and the
ownership marker every destructive operation reads first.

Delta refuses to create a table over a non-empty path that is not a Delta table, and Hive's
managed/external split exists because DROP deleted shared data. Here a table claims a location that no
other table's location equals, contains or lies inside (in any namespace of the catalog, and any table
whose marker is found above it), that is not the warehouse root or above it, and that is empty; it then
writes its id into `_acidtables/owner.json`. Drop, cleanup and vacuum read that marker and refuse when
it names another table, so a stale handle or a second catalog can never delete data it does not own.
Locations are compared in one canonical spelling (`location_key`), local paths and URIs alike.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from acidtables.core.errors import InvalidArgumentError, LocationNotOwnedError
from acidtables.core.storage.storage import DROPPED_MARKER, METADATA_DIR, OWNER_MARKER, Storage, normalize_location

#: object-store schemes that name the same objects (Hadoop's s3a and s3n are S3)
_SAME_SCHEME = {"s3a": "s3", "s3n": "s3", "file": ""}


def location_key(location: str) -> str:
    """The spelling two locations are compared in: normalised as the log keeps it, `file://` dropped,
    `s3a://` and `s3n://` read as `s3://`, the scheme and bucket in lower case."""
    normal = normalize_location(location)
    if "://" not in normal:
        return normal
    parts = urlsplit(normal)
    scheme = _SAME_SCHEME.get(parts.scheme.lower(), parts.scheme.lower())
    if not scheme:
        return parts.path.rstrip("/") or "/"
    return f"{scheme}://{parts.netloc.lower()}{parts.path.rstrip('/')}"


def contains(outer: str, inner: str) -> bool:
    """Whether location `inner` is `outer` or lies under it (both as `location_key` spells them)."""
    return inner == outer or inner.startswith(outer.rstrip("/") + "/")


def _ancestors(location: str) -> list[str]:
    """The locations above `location`, nearest first (up to the file-system root or the bucket)."""
    normal = normalize_location(location)
    if "://" not in normal or normal.startswith("file://"):
        path = urlsplit(normal).path if normal.startswith("file://") else normal
        out = []
        while path not in ("/", ""):
            path = path.rsplit("/", 1)[0] or "/"
            out.append(path)
        return out
    parts = urlsplit(normal)
    segments = [s for s in parts.path.split("/") if s]
    return [
        f"{parts.scheme}://{parts.netloc}/{'/'.join(segments[:i])}".rstrip("/")
        for i in range(len(segments) - 1, -1, -1)
    ]


@dataclass(frozen=True)
class Owner:
    """What `_acidtables/owner.json` says: the table that owns the location."""

    table_id: str
    name: str

    def to_json(self) -> bytes:
        return json.dumps({"table_id": self.table_id, "name": self.name}).encode()


def read_owner(storage: Storage) -> Owner | None:
    """The live owner of a location: None when there is no marker, or its table was dropped with its data."""
    data = storage.read_json(OWNER_MARKER)
    if data is None or not isinstance(data.get("table_id"), str):
        return None
    dropped = storage.read_json(DROPPED_MARKER)
    if dropped is not None and dropped.get("table_id") == data["table_id"]:
        return None
    return Owner(data["table_id"], str(data.get("name", "?")))


def _dropped_and_free(storage: Storage, now_us: int, lease_seconds: float) -> bool:
    """Whether the location holds only the markers of a table dropped with its data, long enough ago that
    none of its transactions can still be running (their leases have expired)."""
    if storage.top_entries() != [METADATA_DIR]:
        return False
    names = sorted(entry.path.rsplit("/", 1)[-1] for entry in storage.list_dir(METADATA_DIR))
    if names != ["dropped.json", "owner.json"]:
        return False
    owner, dropped = storage.read_json(OWNER_MARKER), storage.read_json(DROPPED_MARKER)
    if owner is None or dropped is None or owner.get("table_id") != dropped.get("table_id"):
        return False
    dropped_at = dropped.get("dropped_at_us")
    return isinstance(dropped_at, int) and now_us - dropped_at >= lease_seconds * 1_000_000


def check_location_is_free(
    location: str,
    *,
    warehouse: str,
    tables: Sequence[tuple[str, str]],
    storage: Storage,
    now_us: int,
    lease_seconds: float,
    method: str = "create_table",
) -> bool:
    """Refuse a location another table owns or could own, naming both paths; `tables` are every table
    the catalog knows as (name, location). Returns True when the location holds the markers of a table
    dropped with its data that may now be cleared."""
    for spelling in _spellings(location):
        _check_against_tables(spelling, location, warehouse=warehouse, tables=tables, method=method)
    state = storage.root_state()
    if state == "file":
        raise InvalidArgumentError(f"{method}(): location {location} is a file, not a directory")
    if state == "directory" and storage.top_entries():
        if _dropped_and_free(storage, now_us, lease_seconds):
            return True
        owner = read_owner(storage)
        whose = f"it belongs to table {owner.name} (id {owner.table_id})" if owner else "it is not an acidtables table"
        raise InvalidArgumentError(
            f"{method}(): location {location} is not empty and {whose}; give an empty or new directory (a table "
            "dropped with its data frees its location once its transactions' leases have expired)"
        )
    return False


def _spellings(location: str) -> list[str]:
    """The location as given and, on local disk, as its symlinks resolve: an alias of a directory inside
    another table's location is inside it too."""
    normal = normalize_location(location)
    path = urlsplit(normal).path if normal.startswith("file://") else normal
    if "://" in path:
        return [normal]
    real = os.path.realpath(path)
    return [normal] if real == path else [normal, real]


def _check_against_tables(
    location: str, given: str, *, warehouse: str, tables: Sequence[tuple[str, str]], method: str
) -> None:
    key = location_key(location)
    root = location_key(warehouse)
    if contains(key, root):
        where = "the warehouse root" if key == root else f"above the warehouse root {warehouse}"
        raise InvalidArgumentError(
            f"{method}(): location {given} is {where}; a table's location must be a directory of its own "
            "inside the warehouse (or elsewhere), never one holding other tables"
        )
    for name, other in tables:
        other_key = location_key(other)
        if key == other_key:
            relation = "is the location of"
        elif contains(other_key, key):
            relation = "lies inside the location of"
        elif contains(key, other_key):
            relation = "contains the location of"
        else:
            continue
        raise InvalidArgumentError(
            f"{method}(): location {given} {relation} table {name} ({other}); every table needs a location of "
            "its own, neither inside nor around another's"
        )
    for ancestor in _ancestors(location):
        owner = read_owner(Storage(ancestor))
        if owner is not None:
            raise InvalidArgumentError(
                f"{method}(): location {given} lies inside {ancestor}, the location of table {owner.name} (id "
                f"{owner.table_id}); every table needs a location of its own"
            )


def claim(storage: Storage, owner: Owner, *, clear_dropped: bool) -> None:
    """Write the ownership marker (exclusively, on local disk: of two creators only one wins)."""
    if clear_dropped:
        storage.delete(DROPPED_MARKER)
        storage.delete(OWNER_MARKER)
    storage.make_root()
    storage.write_exclusive(OWNER_MARKER, owner.to_json())


def release(storage: Storage, owner: Owner) -> None:
    """Undo `claim` when the catalog entry could not be created: the marker goes if it is still ours."""
    current = read_owner(storage)
    if current is not None and current.table_id == owner.table_id:
        storage.delete(OWNER_MARKER)
        storage.remove_empty_dirs(METADATA_DIR)
        storage.remove_empty_dirs("")


def check_owner(storage: Storage, table_id: str, name: str, method: str) -> None:
    """Refuse a destructive operation unless the location's marker names this table."""
    owner = read_owner(storage)
    if owner is None or owner.table_id != table_id:
        found = (
            f"its marker names table {owner.name} (id {owner.table_id})"
            if owner is not None
            else f"it has no ownership marker ({OWNER_MARKER}) of a live table"
        )
        raise LocationNotOwnedError(
            f"{method}(): {name} (id {table_id}) does not own {storage.location}: {found}. Nothing was deleted"
        )


def mark_dropped(storage: Storage, table_id: str, now_us: int) -> None:
    """Leave the tombstone that frees the location once the dropped table's leases have expired."""
    storage.write_exclusive(DROPPED_MARKER, json.dumps({"table_id": table_id, "dropped_at_us": now_us}).encode())
