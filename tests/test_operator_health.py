"""The operator's /healthz and /readyz (operator/health.py) turn red for the reasons they name: a
blocked event loop, a dead etcd watch or change-feed follower (liveness); an API server or etcd that
does not answer (readiness). The operator runs for real (kopf, a real etcd) against kmock's emulated
API server (tests/helpers/kmock_operator.py)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.helpers.kmock_operator import KmockOperator, running_operator

from acidtables.core.coordination.embedded import EmbeddedEtcd


@pytest.fixture
def op(
    tmp_path: Path, etcd_server: EmbeddedEtcd, etcd_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[KmockOperator]:
    yield from running_operator(tmp_path, etcd_server.endpoint, etcd_prefix, monkeypatch.setenv)


def failing(op: KmockOperator, which: str, check: str) -> Any:
    """The probe's body once it answers 503 with `check` failing (None until then)."""
    code, body = op.probe(which)
    return body if code == 503 and body["checks"][check] != "ok" else None


def passing(op: KmockOperator, which: str) -> Any:
    code, body = op.probe(which)
    return body if code == 200 else None


def test_a_running_leader_is_live_and_ready(op: KmockOperator) -> None:
    live = op.eventually(lambda: passing(op, "healthz"), "/healthz answers 200")
    ready = op.eventually(lambda: passing(op, "readyz"), "/readyz answers 200")
    assert set(live["checks"]) == {"loop", "etcd-client", "etcd-watch"}
    assert ready["checks"] == {"etcd": "ok", "kubernetes-api": "ok"}


def test_a_blocked_event_loop_fails_liveness_until_it_turns_again(op: KmockOperator) -> None:
    op.eventually(lambda: passing(op, "healthz"), "/healthz answers 200")
    loop = op.eventually(lambda: op.health.loop, "the heartbeat runs in kopf's loop")
    release = threading.Event()
    # what a handler doing blocking I/O on the loop does: nothing else in the loop runs meanwhile
    loop.call_soon_threadsafe(lambda: release.wait(30))
    try:
        body = op.eventually(lambda: failing(op, "healthz", "loop"), "/healthz fails on the blocked loop")
        assert "has not run its heartbeat" in body["checks"]["loop"]
        assert op.probe("readyz")[0] == 200  # a blocked loop is a liveness matter only
    finally:
        release.set()
    op.eventually(lambda: passing(op, "healthz"), "/healthz recovers once the loop turns")


def test_a_closed_etcd_watch_fails_liveness(op: KmockOperator) -> None:
    op.eventually(lambda: passing(op, "healthz"), "/healthz answers 200")
    assert op.context is not None and op.context.follower is not None
    follower = op.context.follower
    follower.watch_down_limit_seconds = 0.5
    follower.feed.close()  # the watch is gone and nothing restarts a closed feed
    body = op.eventually(lambda: failing(op, "healthz", "etcd-watch"), "/healthz fails on the dead watch")
    assert "the etcd watch has been down" in body["checks"]["etcd-watch"]


class _Died(BaseException):
    """What kills a thread outright (not an Exception: the follower's loop survives those)."""


def test_a_dead_change_feed_follower_fails_liveness(op: KmockOperator, monkeypatch: pytest.MonkeyPatch) -> None:
    op.eventually(lambda: passing(op, "healthz"), "/healthz answers 200")
    assert op.context is not None and op.context.follower is not None
    follower = op.context.follower

    def die(timeout_seconds: float) -> Any:
        raise _Died("the follower thread dies")

    monkeypatch.setattr(threading, "excepthook", lambda args: None)  # the death is the point, not noise
    monkeypatch.setattr(follower.feed, "next", die)
    body = op.eventually(lambda: failing(op, "healthz", "etcd-watch"), "/healthz fails on the dead follower")
    assert "follower thread ended" in body["checks"]["etcd-watch"]


def test_an_api_server_that_does_not_answer_fails_readiness_not_liveness(op: KmockOperator) -> None:
    op.eventually(lambda: passing(op, "readyz"), "/readyz answers 200")
    op.stop_kube()
    body = op.eventually(lambda: failing(op, "readyz", "kubernetes-api"), "/readyz fails without the API server")
    assert "cannot be reached" in body["checks"]["kubernetes-api"]
    assert body["checks"]["etcd"] == "ok"
    assert op.probe("healthz")[0] == 200


def test_etcd_that_does_not_answer_fails_readiness_not_liveness(
    tmp_path: Path, etcd_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with EmbeddedEtcd(tmp_path / "etcd") as etcd:
        # a lease longer than the outage: this replica stays the leader throughout
        for op in running_operator(tmp_path, etcd.endpoint, etcd_prefix, monkeypatch.setenv, lease_seconds=60):
            check_etcd_outage(op, etcd)


def check_etcd_outage(op: KmockOperator, etcd: EmbeddedEtcd) -> None:
    op.eventually(lambda: passing(op, "readyz"), "/readyz answers 200")
    etcd.stop()
    body = op.eventually(lambda: failing(op, "readyz", "etcd"), "/readyz fails without etcd")
    assert body["checks"]["kubernetes-api"] == "ok"
    assert op.probe("healthz")[0] == 200  # restarting the operator would not bring etcd back
    etcd.restart()
    op.eventually(lambda: passing(op, "readyz"), "/readyz recovers with etcd", timeout_seconds=30)
