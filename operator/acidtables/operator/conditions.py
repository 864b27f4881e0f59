"""Status conditions in the shape of metav1.Condition, so `kubectl wait --for=condition=Ready` works.

A condition's lastTransitionTime changes only when its status does; reason is CamelCase; every
condition carries the generation it was computed for.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

READY, COMPACTING, DEGRADED = "Ready", "Compacting", "Degraded"


def stamp(moment: datetime) -> str:
    """A time as Kubernetes writes one in status (RFC 3339, seconds, UTC)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def now() -> str:
    return stamp(datetime.now(UTC))


def condition(
    previous: Sequence[Mapping[str, Any]] | None,
    type_: str,
    status: bool,
    reason: str,
    message: str,
    generation: int | None,
) -> dict[str, Any]:
    """The condition `type_`, keeping the old transition time when its status did not change."""
    value = "True" if status else "False"
    old = next((c for c in previous or () if c.get("type") == type_), None)
    changed = old is None or old.get("status") != value
    out: dict[str, Any] = {
        "type": type_,
        "status": value,
        "reason": reason,
        "message": message[:32000],
        "lastTransitionTime": now() if changed or old is None else old.get("lastTransitionTime", now()),
    }
    if generation is not None:
        out["observedGeneration"] = generation
    return out


def merged(previous: Sequence[Mapping[str, Any]] | None, *updates: dict[str, Any]) -> list[dict[str, Any]]:
    """`previous` with `updates` replacing conditions of the same type (the list is a map by type)."""
    by_type = {str(c.get("type")): dict(c) for c in previous or ()}
    for update in updates:
        by_type[update["type"]] = update
    return sorted(by_type.values(), key=lambda c: str(c["type"]))
