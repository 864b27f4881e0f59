"""`acidtables release-finalizers`: the result object for operator.finalizers (see there for why)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from acidtables.operator.finalizers import Released, release_finalizers

from .output import table


@dataclass(frozen=True)
class ReleasedResult:
    namespace: str | None
    dry_run: bool
    released: tuple[Released, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "dry_run": self.dry_run,
            "released": [
                {
                    "kind": r.kind,
                    "namespace": r.namespace,
                    "name": r.name,
                    "deleting": r.deleting,
                    "other_finalizers": list(r.others),
                }
                for r in self.released
            ],
        }

    def to_text(self) -> str:
        if not self.released:
            return "no AcidTable or CompactionJob holds acidtables' finalizer"
        verb = "would release" if self.dry_run else "released"
        rows = [(r.kind, r.namespace, r.name, _after(r)) for r in self.released]
        return f"{verb} {len(rows)} resource(s):\n" + table(("KIND", "NAMESPACE", "NAME", "NOW"), rows)


def _after(r: Released) -> str:
    if not r.deleting:
        return "kept (not being deleted)"
    return f"held by {', '.join(r.others)}" if r.others else "deleted"


def release(namespace: str | None, dry_run: bool) -> ReleasedResult:
    return ReleasedResult(namespace, dry_run, tuple(release_finalizers(namespace, dry_run=dry_run)))
