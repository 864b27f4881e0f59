"""The background work of a process (checkpoints, archiving; issue 32): one request per key, the value
`combine` keeps, settle before a drop, and a thread that ends when its owner closes."""

from __future__ import annotations

import threading
from pathlib import Path

from tests.helpers.tables import HeldCheckpoints, catalog_with
from tests.jobs import insert_into

from acidtables import Catalog
from acidtables.core.log.background import BackgroundWork


class Blocking:
    """Work that records what it did and holds its first call until released."""

    def __init__(self) -> None:
        self.done: list[tuple[str, int]] = []
        self.started, self.release = threading.Event(), threading.Event()

    def __call__(self, key: str, value: int) -> None:
        self.started.set()
        assert self.release.wait(30)
        self.done.append((key, value))


def test_a_key_asked_for_while_queued_runs_once_with_the_value_combine_keeps() -> None:
    work = Blocking()
    queue: BackgroundWork[str, int] = BackgroundWork("test-work", work, combine=max)
    queue.schedule("busy", 0)
    assert work.started.wait(30)  # the thread holds "busy"; what follows waits in the queue
    for value in (200, 100, 150):  # two committing threads may ask out of order: the newest version wins
        queue.schedule("t", value)
    queue.settle("gone")  # nothing to drop: no effect
    queue.schedule("dropped", 1)
    assert queue.settle("dropped", timeout_seconds=5)
    work.release.set()
    assert queue.flush(30)
    assert work.done == [("busy", 0), ("t", 200)]


def test_close_ends_the_thread_and_refuses_later_work() -> None:
    work = Blocking()
    work.release.set()
    queue: BackgroundWork[str, int] = BackgroundWork("test-work", work)
    queue.schedule("t", 1)
    assert queue.flush(30)
    thread = queue._thread
    assert thread is not None
    queue.close()
    thread.join(30)
    assert not thread.is_alive()
    queue.schedule("t", 2)  # after close: dropped, not run on a thread nobody ends
    assert queue.flush(1) and work.done == [("t", 1)]


def test_a_dropped_tables_checkpoint_never_lands_in_its_emptied_location(catalog: Catalog) -> None:
    """Table `b`'s checkpoint is being written (its snapshot loaded) when `b` is dropped with its data: the
    drop waits it out, so the location is left exactly as a drop leaves it (free for a new table once the
    writer's lease ends) and no checkpoint key is left under the dropped prefix."""
    writer = catalog_with(catalog, checkpoint_interval=2)
    try:
        b = writer.create_table("ns.b", schema="id BIGINT, dt STRING", partition_by=["dt"])
        held = HeldCheckpoints(writer)
        for _ in range(2):
            insert_into(b, "p").tx.commit()
        assert held.writing.wait(30)
        location = Path(b.location)
        drop = threading.Thread(target=writer.drop_table, args=("ns.b",), kwargs={"delete_data": True})
        drop.start()
        drop.join(timeout=1.0)  # bounded, not a synchronisation: a drop that did not wait is done by now
        held.release.set()
        drop.join(30)
        assert not drop.is_alive() and writer.services.flush(30)
        assert sorted(p.name for p in location.iterdir()) == ["_acidtables"]
        assert sorted(p.name for p in (location / "_acidtables").iterdir()) == ["dropped.json", "owner.json"]
        assert writer.services.coordinator.checkpoints(b.table_id) == []
    finally:
        writer.close()
