"""The Kubernetes operator (kopf): AcidTable and CompactionJob resources kept in step with etcd.

It holds no table state of its own: etcd is the truth, status is a view of it (design §6). The handlers
(`handlers`) are thin; what they decide lives in `tables` (catalog changes), `definition` (spec versus
table), `status` and `conditions`; `context` follows etcd's change feed to keep status current.
"""

from .main import run

__all__ = ["run"]
