"""A pod network on this machine: a bridge with the node's address, and one network namespace per pod
joined to it by a veth pair, each with an address of its own (as a CNI bridge plugin gives pods).

Pods reach each other and the node (where the test runs the API server and etcd) by those addresses,
over real interfaces; nothing else is routed, so no packet leaves the machine. A process that listens
on 127.0.0.1 in one namespace is out of every other's reach, as in a cluster: which is what the
executor tests need to show (a driver that tells its executors the wrong address is not reached).

Needs root and iproute2 (`ip netns`, veth, bridge). Names are short and carry a random tag, so runs
side by side do not collide; `close` removes everything it made.
"""

from __future__ import annotations

import ipaddress
import os
import random
import shutil
import subprocess
from pathlib import Path

#: where `ip netns add` puts a namespace's handle (podman joins it with --network ns:PATH)
NETNS_DIR = Path("/run/netns")


def available() -> str | None:
    """Why no pod network can be made here, or None when one can."""
    if os.geteuid() != 0:
        return "a pod network needs root (network namespaces, veth pairs, a bridge)"
    if shutil.which("ip") is None:
        return "a pod network needs iproute2's `ip` (apt-get install iproute2)"
    return None


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")


class PodNetwork:
    """The bridge and the pods' namespaces of one test run."""

    def __init__(self) -> None:
        self.tag = f"{random.randrange(16**4):04x}"
        # a /24 in 10.200.0.0/13 picked at random: private, and never a route to anything outside
        block = random.randrange(8 * 256)
        self.subnet = ipaddress.ip_network(f"10.{200 + block // 256}.{block % 256}.0/24")
        hosts = self.subnet.hosts()
        #: the node's address on the pod network: servers the pods use listen here
        self.node_ip = str(next(hosts))
        self._free = [str(address) for address in hosts]
        self.bridge = f"acbr{self.tag}"
        #: pod name -> (namespace name, address)
        self.pods: dict[str, tuple[str, str]] = {}
        self._count = 0
        self._open = False

    def __enter__(self) -> PodNetwork:
        _ip("link", "add", "name", self.bridge, "type", "bridge")
        self._open = True
        _ip("addr", "add", f"{self.node_ip}/{self.subnet.prefixlen}", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def add(self, pod: str) -> tuple[Path, str]:
        """A namespace for `pod` on the bridge: (its handle for podman, the pod's address)."""
        if pod in self.pods:
            namespace, address = self.pods[pod]
            return NETNS_DIR / namespace, address
        self._count += 1
        namespace, host_side = f"acpod{self.tag}-{self._count}", f"acv{self.tag}{self._count}"
        address = self._free.pop(0)
        _ip("netns", "add", namespace)
        self.pods[pod] = (namespace, address)
        _ip("link", "add", host_side, "type", "veth", "peer", "name", "eth0", "netns", namespace)
        _ip("link", "set", host_side, "master", self.bridge, "up")
        _ip("-n", namespace, "addr", "add", f"{address}/{self.subnet.prefixlen}", "dev", "eth0")
        _ip("-n", namespace, "link", "set", "eth0", "up")
        _ip("-n", namespace, "link", "set", "lo", "up")
        return NETNS_DIR / namespace, address

    def remove(self, pod: str) -> None:
        """The pod's namespace goes (its veth pair with it)."""
        found = self.pods.pop(pod, None)
        if found is not None:
            subprocess.run(["ip", "netns", "delete", found[0]], capture_output=True, timeout=30)

    def close(self) -> None:
        for pod in list(self.pods):
            self.remove(pod)
        if self._open:
            subprocess.run(["ip", "link", "delete", self.bridge], capture_output=True, timeout=30)
            self._open = False
