"""What etcd holds, read back and checked: every value is JSON or a number, and anything else is damage
named by its key (CorruptMetadataError), never a crash somewhere later."""

from __future__ import annotations

import json
from typing import Any

from acidtables.core.canonical import canonical_json
from acidtables.core.coordination.keys import pad
from acidtables.core.errors import CorruptMetadataError


def dumps(data: Any) -> bytes:
    """A value as acidtables writes it to etcd: its canonical JSON (core.canonical)."""
    return canonical_json(data)


def json_object(value: bytes, key: str) -> dict[str, Any]:
    """A JSON object read back from etcd."""
    try:
        data = json.loads(value)
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError alike
        raise CorruptMetadataError(f"etcd key {key} does not hold readable JSON ({exc})", key=key) from None
    if not isinstance(data, dict):
        raise CorruptMetadataError(f"etcd key {key} holds a JSON {type(data).__name__}, not an object", key=key)
    return data


def versioned(value: bytes, key: str) -> dict[str, Any]:
    """A head or log entry: a JSON object with an integer `version`."""
    data = json_object(value, key)
    if isinstance(data.get("version"), bool) or not isinstance(data.get("version"), int):
        raise CorruptMetadataError(f"etcd key {key} has no integer version: {str(data)[:200]}", key=key)
    return data


def integer(value: bytes, key: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise CorruptMetadataError(
            f"etcd key {key} should hold a version number, found {value[:80]!r}", key=key
        ) from None


def with_counter(data: dict[str, Any], name: str, key: str) -> dict[str, Any]:
    """A JSON object whose `name` must be a non-negative integer."""
    value = data.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise CorruptMetadataError(f"etcd key {key} has no integer {name}: {str(data)[:200]}", key=key)
    return data


def catalog_entry(value: bytes, key: str) -> dict[str, Any]:
    data = json_object(value, key)
    missing = [field for field in ("table_id", "name", "location") if not isinstance(data.get(field), str)]
    if missing:
        raise CorruptMetadataError(f"catalog entry {key} lacks {', '.join(missing)}: {str(data)[:200]}", key=key)
    return data


def time_entry(value: bytes, meta: Any) -> tuple[int, int]:
    """A time-index key and value: (time version, ID version)."""
    key = meta.key.decode(errors="replace")
    return integer(key.rsplit("/", 1)[1].encode(), key), integer(value, key)


def checkpoint_entry(value: bytes, meta: Any) -> tuple[int, str]:
    """A checkpoint key and value: (version, path of the checkpoint file)."""
    key = meta.key.decode(errors="replace")
    return integer(key.rsplit("/", 1)[1].encode(), key), value.decode()


def log_entry(value: bytes, key: str) -> dict[str, Any]:
    """A log entry, which names the version its key names: a damaged digit would otherwise move it."""
    data = versioned(value, key)
    if key.rsplit("/", 1)[-1] != pad(data["version"]):
        raise CorruptMetadataError(f"etcd key {key} holds a log entry of version {data['version']}", key=key)
    return data


def log_entries(kvs: Any) -> list[dict[str, Any]]:
    """(value, metadata) pairs of log keys, as entries in version order."""
    return sorted(
        (log_entry(v, m.key.decode(errors="replace")) for v, m in kvs), key=lambda entry: int(entry["version"])
    )
