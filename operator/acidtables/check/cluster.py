"""A 3-member etcd cluster on loopback for the history runner (issue 10): the same etcd binary as
the single embedded server, three processes that elect a leader among themselves, so the nemesis can
kill the leader in the middle of commits and the clients must find the new one."""

from __future__ import annotations

import threading
import urllib.request
from pathlib import Path

from acidtables.core import EmbeddedEtcd
from acidtables.core.embedded import free_port


class EtcdCluster:
    """Members `m0..m{n-1}` with their data under `directory`; started together, because a member's
    health (what EmbeddedEtcd.start waits for) needs a quorum, which one member alone never has."""

    def __init__(self, directory: Path, members: int = 3) -> None:
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
