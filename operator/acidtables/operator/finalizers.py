"""`acidtables release-finalizers`: the way out when the operator is gone (issue 25, item 8).

kopf puts the operator's finalizer on every AcidTable and CompactionJob, so that deleting one runs the
operator's deletion handler first (an AcidTable's deletionPolicy). With the operator uninstalled (or
scaled to zero) nothing removes it, and deleting such a resource, or its namespace, waits for ever. This
removes only acidtables' own finalizer (other controllers' stay), from the resources of one namespace
or of all; what was being deleted then goes. The deletion handler does not run for them: an AcidTable
with `deletionPolicy: Delete` released this way leaves its table in etcd and its files in place (as
Retain would), which `acidtables tables` still lists and a new AcidTable of the same name adopts.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)

GROUP, VERSION = "acidtables.io", "v1alpha1"
FINALIZER = "acidtables.io/finalizer"
PLURALS = ("acidtables", "compactionjobs")


@dataclass(frozen=True)
class Released:
    """One resource the finalizer was taken off."""

    kind: str
    namespace: str
    name: str
    #: True when the resource was being deleted (it is gone now, unless `others` hold it)
    deleting: bool
    #: other controllers' finalizers, left in place
    others: tuple[str, ...] = ()


def release_finalizers(namespace: str | None = None, *, dry_run: bool = False) -> list[Released]:
    """Take acidtables' finalizer off the AcidTables and CompactionJobs of `namespace` (all when None),
    with the kubeconfig (KUBECONFIG) or the pod's service account."""
    import kubernetes

    try:
        kubernetes.config.load_incluster_config()  # type: ignore[no-untyped-call]
    except kubernetes.config.ConfigException:  # not in a pod: the user's kubeconfig
        kubernetes.config.load_kube_config(config_file=os.environ.get("KUBECONFIG") or None)  # type: ignore[no-untyped-call]
    custom = kubernetes.client.CustomObjectsApi()
    released = []
    for plural in PLURALS:
        listed: Any = (
            custom.list_namespaced_custom_object(GROUP, VERSION, namespace, plural)
            if namespace
            else custom.list_cluster_custom_object(GROUP, VERSION, plural)
        )
        for item in listed.get("items", []):
            meta = item["metadata"]
            held = meta.get("finalizers") or []
            if FINALIZER not in held:
                continue
            if not dry_run:
                # the list without ours, and the version read: a concurrent change makes this a 409
                # (run it again) instead of dropping a finalizer another controller just added
                patch = {
                    "metadata": {
                        "finalizers": [f for f in held if f != FINALIZER],
                        "resourceVersion": meta.get("resourceVersion"),
                    }
                }
                custom.patch_namespaced_custom_object(GROUP, VERSION, meta["namespace"], plural, meta["name"], patch)
            others = tuple(f for f in held if f != FINALIZER)
            kind = item.get("kind") or plural
            released.append(
                Released(kind, meta["namespace"], meta["name"], bool(meta.get("deletionTimestamp")), others)
            )
    return released


__all__ = ["FINALIZER", "Released", "release_finalizers"]
