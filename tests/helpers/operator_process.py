"""The operator as its own process (`acidtables operator`), as a cluster runs it: real kopf, real
kube-apiserver, real etcd. Stopped with SIGTERM, as Kubernetes stops a pod; its log is kept for the
failure message."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path


class OperatorProcess:
    def __init__(self, log: Path, env: Mapping[str, str], namespaces: list[str]) -> None:
        self.log_path = log
        argv = [sys.executable, "-m", "acidtables.cli.main", "operator"]
        for namespace in namespaces:
            argv += ["--namespace", namespace]
        with log.open("wb") as out:
            # faulthandler: a process that overstays its SIGTERM dumps every thread's stack on SIGABRT
            self.process = subprocess.Popen(
                argv,
                env={**os.environ, "PYTHONFAULTHANDLER": "1", **env},
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, timeout_seconds: float = 30.0) -> int:
        """SIGTERM, then wait; kill only if it overstays. Returns the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout_seconds)
            except subprocess.TimeoutExpired:
                self.process.send_signal(signal.SIGABRT)  # the stacks go to the log, for the failure message
                try:
                    self.process.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait()
        return self.process.returncode
