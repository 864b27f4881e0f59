"""The e2e tier's one fixture: the chart installed in a fresh namespace for each test module.

Everything the tier needs is ACIDTABLES_E2E_KUBECONFIG (a cluster) and ACIDTABLES_E2E_IMAGE (an image
built from spark-images/Dockerfile that its nodes can pull); tests/helpers/cluster.py says what it
installs and README's testing section how to run it. A module sets CHART_VALUES to change the chart's
values for its install (two replicas, say).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.helpers.cluster import IMAGE_VARIABLE, KUBECONFIG_VARIABLE, Cluster, Release, install, skip_reason, tear_down


@pytest.fixture(scope="module")
def release(request: pytest.FixtureRequest) -> Iterator[Release]:
    reason = skip_reason()
    if reason is not None:
        pytest.skip(reason)
    image = os.environ.get(IMAGE_VARIABLE, "").strip()
    if not image:
        pytest.fail(
            f"{KUBECONFIG_VARIABLE} is set but {IMAGE_VARIABLE} is not: the tier runs the operator, the jobs "
            "and its writer pods from that image (built from spark-images/Dockerfile)"
        )
    overrides = dict(getattr(request.module, "CHART_VALUES", {}))
    installed = install(Cluster(Path(os.environ[KUBECONFIG_VARIABLE])), image, **overrides)
    try:
        installed.wait_for_operator(int(overrides.get("replicas", 1)))
        yield installed
    finally:
        tear_down(installed)
