"""Run Helm's engine (tests/helpers/helm_driver.py under the helm venv) against the envtest API server, or
render the chart with it against no API server at all (`render`)."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Sequence
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
    "Helm's engine (helm-sdkpy) needs Python 3.12 or newer: with one as python3, python3.1x or pyenv's 3.12.1, "
    "`make test-env` builds .venv-helm; or point ACIDTABLES_HELM_PYTHON at an interpreter that has helm-sdkpy"
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


def render(
    python: Path,
    release: str,
    namespace: str,
    chart: Path,
    steps: Sequence[dict[str, Any]],
    objects: Sequence[dict[str, Any]] = (),
) -> list[dict[str, Any]]:
    """Helm's install of steps[0] then an upgrade to each next values, with no API server (helm_stub_api.py).

    `objects` are what the stub holds before the install (claims left by an earlier release, say), so
    the chart's `lookup` sees them. One answer per step: {"ok", "manifest", "notes"} or {"ok", "error"}.
    """
    answer = helm(
        python, None, "render", release, namespace, str(chart), json.dumps(list(steps)), json.dumps(list(objects))
    )
    if not answer["ok"]:
        raise AssertionError(f"the helm driver failed: {answer['error']}")
    steps_answered: list[dict[str, Any]] = answer["result"]
    return steps_answered
