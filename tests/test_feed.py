"""The change feed the operator keeps status and metrics from: state at one revision, then every change,
through dropped connections and etcd's compaction of its history."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
from tests.helpers.tables import etcd_client, staged_parquet

from acidtables import Catalog
from acidtables.check.proxy import HoldingProxy
from acidtables.core import ChangeFeed, KeyChange, Resync
from acidtables.core.coordination.coordinator import Coordinator
from acidtables.core.coordination.embedded import EmbeddedEtcd
from acidtables.core.settings import EtcdSettings

SCHEMA = "id BIGINT, dt STRING"


def commit(catalog: Catalog, name: str) -> int:
    table = catalog.table(name)
    with table.begin("insert_into") as tx:
        tx.add_files([staged_parquet(tx, {"dt": "a"})])
        return tx.commit().version


def collect(
    feed: ChangeFeed, done: Callable[[list[KeyChange | Resync]], bool], timeout_seconds: float = 20.0
) -> list[KeyChange | Resync]:
    """Everything the feed hands over until `done` holds for it (a deadline, not a sleep)."""
    seen: list[KeyChange | Resync] = []
    deadline = time.monotonic() + timeout_seconds
    while not done(seen):
        if time.monotonic() > deadline:
            raise AssertionError(f"the feed did not deliver in {timeout_seconds:g} s; it gave {seen}")
        got = feed.next(0.2)
        seen.extend([got] if isinstance(got, Resync) else got)
    return seen


def head_versions(items: list[KeyChange | Resync]) -> list[int]:
    out = []
    for item in items:
        changes = item.state if isinstance(item, Resync) else (item,)
        out += [c.value["version"] for c in changes if c.kind == "head" and c.value is not None]
    return out


@pytest.fixture
def proxy(etcd_server: EmbeddedEtcd) -> Iterator[HoldingProxy]:
    with HoldingProxy(etcd_server.host, etcd_server.client_port) as running:
        yield running


@pytest.fixture
def feed(catalog: Catalog, proxy: HoldingProxy) -> Iterator[ChangeFeed]:
    """A feed on the catalog's prefix, reaching etcd through a proxy the test can cut."""
    settings = EtcdSettings((proxy.endpoint,), prefix=catalog.settings.etcd.prefix, unavailable_timeout_seconds=5)
    coordinator = Coordinator(settings)
    following = ChangeFeed(coordinator)
    try:
        yield following
    finally:
        following.close()
        coordinator.close()


def test_the_feed_starts_from_the_state_and_follows_heads_inflight_and_events(
    catalog: Catalog, feed: ChangeFeed
) -> None:
    table = catalog.create_table("ns.fed", schema=SCHEMA, partition_by=["dt"])
    commit(catalog, "ns.fed")
    start = feed.start()
    kinds = {(c.kind, c.table_id) for c in start.state}
    assert {("catalog", table.table_id), ("head", table.table_id)} <= kinds
    assert head_versions([start]) == [1]

    tx = table.begin("insert_into")
    registered = collect(feed, lambda seen: any(c.kind == "inflight" for c in seen if isinstance(c, KeyChange)))
    inflight = next(c for c in registered if isinstance(c, KeyChange) and c.kind == "inflight")
    assert inflight.key.endswith(tx.txn_id) and inflight.value is not None
    assert inflight.value["operation"] == "insert_into"

    tx.abort()
    after_abort = collect(feed, lambda seen: any(c.kind == "event" for c in seen if isinstance(c, KeyChange)))
    assert any(c.kind == "inflight" and c.deleted for c in after_abort if isinstance(c, KeyChange))
    event = next(c for c in after_abort if isinstance(c, KeyChange) and c.kind == "event")
    assert event.value is not None and event.value["kind"] == "aborted" and event.value["txn_id"] == tx.txn_id

    version = commit(catalog, "ns.fed")
    assert head_versions(collect(feed, lambda seen: bool(head_versions(seen)))) == [version] == [2]
    assert feed.revision >= start.revision


def test_a_dropped_connection_resumes_where_it_was_and_misses_nothing(
    catalog: Catalog, feed: ChangeFeed, proxy: HoldingProxy
) -> None:
    catalog.create_table("ns.drop", schema=SCHEMA, partition_by=["dt"])
    feed.start()
    accepted = proxy.accepted
    proxy.disarm()  # every open connection drops, as after a partition
    versions = [commit(catalog, "ns.drop") for _ in range(3)]
    seen = collect(feed, lambda got: head_versions(got)[-1:] == versions[-1:])
    assert head_versions(seen) == versions  # each commit once, in order, none lost
    assert not any(isinstance(item, Resync) for item in seen)
    assert proxy.accepted > accepted and feed.up


def test_a_compacted_history_makes_the_feed_read_the_state_again(
    catalog: Catalog, feed: ChangeFeed, proxy: HoldingProxy, etcd_server: EmbeddedEtcd
) -> None:
    catalog.create_table("ns.compacted", schema=SCHEMA, partition_by=["dt"])
    feed.start()
    proxy.arm()  # the watch hears nothing from here on
    versions = [commit(catalog, "ns.compacted") for _ in range(2)]
    raw = etcd_client(etcd_server.host, etcd_server.client_port)
    raw.compact(int(raw.get_response("/").header.revision))  # what etcd's --auto-compaction does
    proxy.disarm()  # the watch restarts from a revision etcd no longer has
    seen = collect(feed, lambda got: any(isinstance(item, Resync) for item in got))
    resync = next(item for item in seen if isinstance(item, Resync))
    assert head_versions([resync]) == [versions[-1]]
    assert feed.revision == resync.revision and feed.up


def published_scopes(seen: list[KeyChange | Resync]) -> list[tuple[object, int, str]]:
    """(partitions, read version, operation) of every in-flight update that carries a scope."""
    return [
        (c.value["partitions"], c.value["read_version"], c.value["operation"])
        for c in seen
        if isinstance(c, KeyChange) and c.kind == "inflight" and c.value is not None and "partitions" in c.value
    ]


def test_an_in_flight_transaction_publishes_the_partitions_it_writes(catalog: Catalog, feed: ChangeFeed) -> None:
    table = catalog.create_table("ns.scoped", schema=SCHEMA, partition_by=["dt"])
    feed.start()
    tx = table.begin("insert_into")
    tx.add_files([staged_parquet(tx, {"dt": "a"})])
    assert published_scopes(collect(feed, lambda seen: bool(published_scopes(seen)))) == [
        ([{"dt": "a"}], 0, "insert_into")
    ]
    tx.set_scope(None)  # the whole table now
    assert published_scopes(collect(feed, lambda seen: bool(published_scopes(seen)))) == [(None, 0, "insert_into")]
    tx.abort()


def test_a_scope_with_a_null_partition_is_published_too(catalog: Catalog, feed: ChangeFeed) -> None:
    table = catalog.create_table("ns.nulls", schema=SCHEMA, partition_by=["dt"])
    feed.start()
    tx = table.begin("insert_into")
    tx.add_files([staged_parquet(tx, {"dt": None}), staged_parquet(tx, {"dt": "a"})])
    assert published_scopes(collect(feed, lambda seen: bool(published_scopes(seen)))) == [
        ([{"dt": "a"}, {"dt": None}], 0, "insert_into")
    ]
    assert tx.commit().version == 1
