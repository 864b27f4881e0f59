"""SIGTERM stops the operator whenever it arrives, as the pod's PID 1 receives it on every rollout.

In a container the kernel delivers SIGTERM to PID 1 only while it has a handler; with the default
disposition the signal is dropped and Kubernetes waits out the grace period. The operator once put its
own handler back to the default between winning the leader lease and kopf installing kopf's, and the
image test's SIGTERM, sent the moment /readyz answered, fell into that gap: the container never
stopped. kopf's asyncio loop, closing, puts the defaults back too: a SIGTERM on the way out (resigning
the lease, closing the catalog) found none. These run `acidtables.operator.main.run` as a process's
main thread, as the image does, and signal it at the moments that matter.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from acidtables.core.coordination.embedded import EmbeddedEtcd

#: run() on the main thread against a real etcd, with kopf's part replaced: the SIGTERM arrives where
#: `MOMENT` says, and the process reports whether its stop flag was raised
SCRIPT = textwrap.dedent(
    """
    import asyncio, os, signal, sys
    from acidtables.core import exit_process
    from acidtables.operator import main as operator_main

    moment = sys.argv[1]

    def signalled() -> None:
        os.kill(os.getpid(), signal.SIGTERM)

    def kopf_run(*, stop_flag, **_):
        if moment == "before-kopf":  # leader already, kopf's own handler not yet installed
            signalled()

        async def kopf_loop():  # as kopf runs: its handler while the loop runs, the defaults after
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop_flag.set)

        asyncio.run(kopf_loop())
        if moment == "after-kopf":  # kopf stopped by itself (its leader lease lost): no stop wanted
            print("kopf ended by itself", flush=True)
            return
        if not stop_flag.wait(60):
            print("kopf was never told to stop", flush=True)
            sys.exit(3)
        print("kopf told to stop", flush=True)

    install_checks = operator_main.install_checks
    campaign = operator_main.campaign

    def signal_then_install_checks(*args, **kwargs):
        if moment == "starting":  # connected to etcd, probes and servers not started yet
            signalled()
        return install_checks(*args, **kwargs)

    def campaign_signalled_on_resign(*args, **kwargs):
        leadership = campaign(*args, **kwargs)
        if leadership is None:  # stopped while campaigning
            return None
        resign = leadership.resign

        def signal_then_resign():  # kopf has returned: the way out
            if moment == "after-kopf":
                signalled()
            resign()

        leadership.resign = signal_then_resign
        return leadership

    operator_main.kopf.run = kopf_run
    operator_main.install_checks = signal_then_install_checks
    operator_main.campaign = campaign_signalled_on_resign
    operator_main.run(namespaces=["default"], health_port=0, metrics_port=0)
    print("stopped cleanly", flush=True)
    exit_process(0)  # as the CLI leaves
    """
)


KUBECONFIG = textwrap.dedent(
    """
    apiVersion: v1
    kind: Config
    clusters: [{name: none, cluster: {server: "http://127.0.0.1:9"}}]
    users: [{name: none, user: {}}]
    contexts: [{name: none, context: {cluster: none, user: none}}]
    current-context: none
    """
)


@pytest.mark.parametrize("moment", ["starting", "before-kopf", "after-kopf"])
def test_sigterm_stops_the_operator_cleanly_at_any_moment_of_its_start(
    moment: str, etcd_server: EmbeddedEtcd, etcd_prefix: str, tmp_path: Path
) -> None:
    kubeconfig = tmp_path / "kubeconfig"  # an API server nobody answers at: kopf's part is replaced
    kubeconfig.write_text(KUBECONFIG)
    env = {
        **os.environ,
        "ACIDTABLES_ETCD_ENDPOINTS": etcd_server.endpoint,
        "ACIDTABLES_ETCD_PREFIX": etcd_prefix,
        "ACIDTABLES_WAREHOUSE": str(tmp_path / "warehouse"),
        "KUBECONFIG": str(kubeconfig),
    }
    done = subprocess.run([sys.executable, "-c", SCRIPT, moment], env=env, capture_output=True, text=True, timeout=120)
    output = done.stdout + done.stderr
    # -15: the default disposition ended it (and as PID 1 in a container it would have been dropped)
    assert done.returncode == 0, f"exit {done.returncode}\n{output[-4000:]}"
    assert "stopped cleanly" in done.stdout
    if moment == "before-kopf":
        assert "kopf told to stop" in done.stdout  # the signal reached kopf through the stop flag
    elif moment == "starting":
        assert "kopf" not in done.stdout  # stopped before its campaign: kopf never started
