"""Why a pod cannot start, read from its status as the kubelet and the scheduler write it: the causes
that do not pass by themselves within seconds, which the operator reports on the job at once
(issue 30, item 4) rather than when an attempt's start timeout runs out."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: container waiting reasons that do not clear by themselves within seconds (the pod needs a Secret,
#: ConfigMap or image that is not there), reported at once instead of at the start timeout
STUCK_REASONS = frozenset(
    {"CreateContainerConfigError", "CreateContainerError", "ErrImagePull", "ImagePullBackOff", "InvalidImageName"}
)
#: container waiting reasons no retry of the same pod spec can cure
PERMANENT_REASONS = frozenset({"InvalidImageName"})
#: the scheduler's word for a claim the pod mounts that does not exist: no attempt can start without it
_MISSING_CLAIM = re.compile(r'persistentvolumeclaim "([^"]+)" not found', re.IGNORECASE)


@dataclass(frozen=True)
class Blocked:
    """Why a pod of a job (its driver, or an executor) cannot start, said on the job at once."""

    reason: str
    message: str
    #: whether retrying the same pod can help (a claim or image may appear; an invalid name will not)
    permanent: bool


def blocked(pod: Mapping[str, Any], who: str = "the driver pod") -> Blocked | None:
    """What keeps a pod (`who`: the driver pod, or an executor pod) from starting, when it is something
    that will not pass by itself within seconds: a container waiting on a Secret, ConfigMap or image,
    or a pod the scheduler cannot place (a claim that does not exist, too little CPU or memory)."""
    for container in pod.get("status", {}).get("containerStatuses") or []:
        waiting = (container.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in STUCK_REASONS:
            reason = str(waiting["reason"])
            message = f"{who} cannot start: {reason}: {waiting.get('message') or reason}"
            return Blocked(reason, message, reason in PERMANENT_REASONS)
    for condition in pod.get("status", {}).get("conditions") or []:
        if condition.get("type") != "PodScheduled" or condition.get("status") != "False":
            continue
        if condition.get("reason") != "Unschedulable":
            continue
        said = str(condition.get("message") or "no node can run it")
        claim = _MISSING_CLAIM.search(said)
        if claim:
            namespace = pod.get("metadata", {}).get("namespace", "")
            message = (
                f"{who} cannot be scheduled: it mounts PersistentVolumeClaim {claim.group(1)}, which does "
                f"not exist in namespace {namespace} (the scheduler: {said}); create the claim there, or run the "
                "job where the warehouse's claim is (the chart's warehouse.volume)"
            )
            return Blocked("ClaimNotFound", message, True)
        return Blocked("Unschedulable", f"{who} cannot be scheduled: {said}", False)
    return None


__all__ = ["PERMANENT_REASONS", "STUCK_REASONS", "Blocked", "blocked"]
