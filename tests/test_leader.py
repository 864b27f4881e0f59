"""Leader election on an etcd lease (core.coordination.leader), against real etcd: one leader, a standby that takes
over when the leader's lease ends, and a leader that notices it lost."""

from __future__ import annotations

import threading

from acidtables import Catalog
from acidtables.core import Leadership, campaign
from acidtables.core.coordination.coordinator import Coordinator


def coordinator(catalog: Catalog) -> Coordinator:
    return Coordinator(catalog.settings.etcd)


def run_campaign(coord: Coordinator, identity: str, stop: threading.Event) -> tuple[threading.Thread, list[Leadership]]:
    won: list[Leadership] = []

    def go() -> None:
        leadership = campaign(coord, "op", identity, ttl=2, stop=stop, interval_seconds=0.1)
        if leadership is not None:
            won.append(leadership)

    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    return thread, won


def test_one_leads_and_a_standby_takes_over_when_the_leader_resigns(catalog: Catalog) -> None:
    a, b = coordinator(catalog), coordinator(catalog)
    first = campaign(a, "op", "a", ttl=5)
    assert first is not None
    stop = threading.Event()
    thread, won = run_campaign(b, "b", stop)
    assert a.try_lead("op", "c", 5) == (None, "a")  # while a leads, nobody else can
    assert won == []
    first.resign()
    thread.join(timeout=10)
    assert [w.identity for w in won] == ["b"] and a.try_lead("op", "c", 5) == (None, "b")
    won[0].resign()
    a.close()
    b.close()


def test_a_dead_leaders_lease_expires_and_the_standby_leads_within_the_ttl(catalog: Catalog) -> None:
    a, b = coordinator(catalog), coordinator(catalog)
    lease, holder = a.try_lead("op", "dead", 2)  # leads, then never refreshes: a killed process
    assert lease is not None and holder is None
    stop = threading.Event()
    thread, won = run_campaign(b, "b", stop)
    thread.join(timeout=10)  # the lease's TTL (2 s) plus a campaign interval, with room to spare
    stop.set()
    assert [w.identity for w in won] == ["b"]
    won[0].resign()
    a.close()
    b.close()


def test_a_leader_whose_lease_is_gone_knows_it_lost(catalog: Catalog) -> None:
    a = coordinator(catalog)
    leadership = campaign(a, "op", "a", ttl=3)
    assert leadership is not None
    a.resign(leadership._lease)  # the lease ends behind its back (etcd expired it during a pause)
    assert leadership.lost.wait(timeout=10)
    a.close()
