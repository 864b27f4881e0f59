"""Run the e2e tier (tests/e2e/) here, with the envtest API server playing the cluster.

    python -m tests.helpers.e2e_local [PYTEST ARGS...]     # e.g. -k compaction -x

It starts envtest's etcd and kube-apiserver (KUBEBUILDER_ASSETS, else .envtest/bin), the test kubelet
with the controllers and the pod network of tests/helpers/local_cluster.py, writes a kubeconfig, and
runs `pytest -m e2e tests/e2e` with ACIDTABLES_E2E_KUBECONFIG pointing at it and an
ACIDTABLES_E2E_IMAGE that nothing pulls (every container runs from this checkout). So the tier's own
code, chart install, pods, waits and assertions, runs here end to end; what it cannot show is what
only a real cluster has (images, scheduling, the container runtime, real DNS and pod networking).

The API server proxies (services/…/proxy, pods/…/log) only to addresses outside 127.0.0.0/8, so the run
happens in a network namespace of its own (`unshare --net`, as root) whose loopback device also holds
POD_IP: pods and the test kubelet's log endpoint are reached there, and nothing leaves the namespace.
Test-only; not part of CI (it takes several minutes).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: the address of every pod and of the node, on this network namespace's loopback device
POD_IP = "10.244.0.10"
#: set inside the network namespace, so the script does not enter another one
INSIDE_VARIABLE = "ACIDTABLES_E2E_LOCAL_NETNS"
#: any image reference: nothing is pulled
IMAGE = "local.test/acidtables:e2e"


def _enter_network_namespace(argv: list[str]) -> int:
    unshare = shutil.which("unshare")
    if unshare is None:
        raise SystemExit("e2e_local needs util-linux's unshare (a network namespace of its own)")
    command = [unshare, "--net", "--", sys.executable, "-m", "tests.helpers.e2e_local", *argv]
    return subprocess.call(command, env={**os.environ, INSIDE_VARIABLE: "1"}, cwd=ROOT)


def _network() -> None:
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    subprocess.run(["ip", "addr", "add", f"{POD_IP}/32", "dev", "lo"], check=True)


def main(argv: list[str]) -> int:
    if not os.environ.get(INSIDE_VARIABLE):
        return _enter_network_namespace(argv)
    _network()
    sys.path.insert(0, str(ROOT))
    from tests.helpers import envtest
    from tests.helpers.local_cluster import ClusterKubelet

    assets = envtest.assets_dir() or ROOT / ".envtest" / "bin"
    if envtest.missing_binaries(assets):
        raise SystemExit(f"no envtest assets in {assets}: set {envtest.ASSETS_VARIABLE}")
    workdir = Path(tempfile.mkdtemp(prefix="acidtables-e2e-local-"))
    started = time.monotonic()
    api = envtest.start(assets, workdir / "kube-apiserver")
    try:
        kubelet = ClusterKubelet(
            api,
            workdir / "kubelet",
            pod_ip=POD_IP,
            path=[str(Path(sys.executable).parent), str(assets)],
            hold_images=("*.invalid/*",),
        )
        (workdir / "kubelet").mkdir()
        with kubelet:
            env = {**os.environ, "ACIDTABLES_E2E_KUBECONFIG": str(api.kubeconfig), "ACIDTABLES_E2E_IMAGE": IMAGE}
            paths = [] if any(Path(arg.split("::")[0]).exists() for arg in argv) else ["tests/e2e"]
            code = subprocess.call(
                [sys.executable, "-m", "pytest", "-m", "e2e", "-p", "no:cacheprovider", *paths, *argv],
                env=env,
                cwd=ROOT,
            )
        if kubelet.errors:
            print(f"test kubelet errors ({len(kubelet.errors)}):", *kubelet.errors[-20:], sep="\n  ")
    finally:
        api.stop()
    print(f"e2e_local: pytest exited {code} after {time.monotonic() - started:.0f} s; the pods' logs: {workdir}")
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
