"""The one spelling acidtables gives a JSON document: sorted keys, no spaces, ASCII.

What etcd holds and what checksums are taken over use this same spelling, so a value read back can be
re-encoded and checked byte for byte. It lives in a leaf of its own because both the coordination layer
(etcd values) and the storage layer (checkpoints, archive segments) need it, and neither imports the
other.
"""

from __future__ import annotations

import json
from typing import Any

#: made once: json.dumps builds a new encoder on every call that passes options, which every commit
#: would pay for (its log entry and its head)
_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"))


def canonical_json(content: Any) -> bytes:
    """`content` in the canonical spelling, as bytes."""
    return _ENCODER.encode(content).encode()


__all__ = ["canonical_json"]
