"""Run Helm's engine (tests/helpers/helm_driver.py under the helm venv) against the envtest API server."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

DRIVER = Path(__file__).with_name("helm_driver.py")
ROOT = Path(__file__).resolve().parents[2]
PYTHON_VARIABLE = "ACIDTABLES_HELM_PYTHON"


def helm_python() -> Path | None:
    """The interpreter that has helm-sdkpy: $ACIDTABLES_HELM_PYTHON, else make's .venv-helm."""
    raw = os.environ.get(PYTHON_VARIABLE) or str(ROOT / ".venv-helm" / "bin" / "python")
    return Path(raw) if Path(raw).exists() else None


#: set by .ci/run: there a missing Helm engine is a failure, not a skip
REQUIRE_VARIABLE = "ACIDTABLES_REQUIRE_HELM"
MISSING = (
    "Helm's engine (helm-sdkpy) needs Python 3.12: install it (e.g. `pyenv install 3.12.1`, or a python3.12 on "
    "PATH) and run `make test-env`, which builds .venv-helm; or point ACIDTABLES_HELM_PYTHON at an interpreter "
    "that has helm-sdkpy"
)


def require_helm_python() -> Path:
    """The helm interpreter; else the test skips saying how to get one (fails where CI requires it)."""
    import pytest

    python = helm_python()
    if python is None:
        if os.environ.get(REQUIRE_VARIABLE):
            pytest.fail(f"{REQUIRE_VARIABLE} is set but {MISSING}")
        pytest.skip(MISSING)
    return python


def helm(python: Path, kubeconfig: Path | None, *args: str) -> dict[str, Any]:
    env = {**os.environ, **({"KUBECONFIG": str(kubeconfig)} if kubeconfig else {})}
    done = subprocess.run([str(python), str(DRIVER), *args], capture_output=True, text=True, timeout=300, env=env)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise AssertionError(f"the helm driver printed no answer (exit {done.returncode}): {done.stderr[-3000:]}")
    answer: dict[str, Any] = json.loads(lines[-1])
    return answer
