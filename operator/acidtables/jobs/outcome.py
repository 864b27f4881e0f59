"""A job's outcome as the termination message the operator reads (Kubernetes keeps at most 4 KiB)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: where Kubernetes reads a container's termination message unless the pod says otherwise
DEFAULT_TERMINATION_LOG = "/dev/termination-log"
TERMINATION_LOG_VARIABLE = "ACIDTABLES_TERMINATION_LOG"
MAX_MESSAGE_BYTES = 4096

#: exit codes: the operator tells a lost conflict (no retry) from a failure (retried up to backoffLimit)
EXIT_SUCCEEDED, EXIT_FAILED, EXIT_CONFLICTED = 0, 1, 3


@dataclass
class JobOutcome:
    phase: str = "Succeeded"
    committed_versions: list[int] = field(default_factory=list)
    files_removed: int = 0
    files_added: int = 0
    bytes_rewritten: int = 0
    groups_skipped: int = 0
    conflict: dict[str, object] | None = None
    message: str = ""

    @property
    def exit_code(self) -> int:
        return {"Succeeded": EXIT_SUCCEEDED, "Conflicted": EXIT_CONFLICTED}.get(self.phase, EXIT_FAILED)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "phase": self.phase,
            "committedVersions": self.committed_versions[-50:],
            "filesRemoved": self.files_removed,
            "filesAdded": self.files_added,
            "bytesRewritten": self.bytes_rewritten,
            "groupsSkipped": self.groups_skipped,
        }
        if self.committed_versions:
            out["committedVersion"] = self.committed_versions[-1]
        if self.conflict is not None:
            out["conflict"] = self.conflict
        if self.message:
            out["message"] = self.message[:1000]
        return out

    def write(self, path: str | None = None) -> Path:
        target = Path(path or os.environ.get(TERMINATION_LOG_VARIABLE) or DEFAULT_TERMINATION_LOG)
        text = json.dumps(self.to_json(), separators=(",", ":"))
        if len(text.encode()) > MAX_MESSAGE_BYTES:  # keep it parseable: drop the list first, then the message
            text = json.dumps({**self.to_json(), "committedVersions": [], "message": ""}, separators=(",", ":"))
        target.write_text(text)
        return target
