"""The key layout documented in core.coordination.keys is the whole truth: every key a table's life
writes under the prefix matches one documented line, and every documented line is written."""

from __future__ import annotations

import re
from dataclasses import replace

from tests.helpers.tables import staged_parquet

from acidtables import Catalog
from acidtables.core.coordination import keys

#: a line of the docstring's table: `    <key pattern>   -> what it holds`
_LINE = re.compile(r"^    (?P<pattern>\S+)\s+-> ", re.M)


def documented() -> dict[str, re.Pattern[str]]:
    """Each documented key pattern, as a regular expression of a key's path under the prefix."""
    assert keys.__doc__ is not None
    out = {}
    for match in _LINE.finditer(keys.__doc__):
        pattern = match.group("pattern")
        regex = "".join(
            "[^/]+?" if part.startswith("<") else re.escape(part) for part in re.split(r"(<[^>]+>)", pattern)
        )
        out[pattern] = re.compile(regex + "$")
    return out


def test_every_key_a_tables_life_writes_is_documented_and_every_documented_key_is_written(catalog: Catalog) -> None:
    small = replace(catalog.settings, commit=replace(catalog.settings.commit, checkpoint_interval=2))
    with Catalog(small) as cat:
        table = cat.create_table("sales.orders", schema="id BIGINT, dt STRING", partition_by=["dt"])
        for _ in range(6):
            with table.begin("insert_into") as tx:
                tx.add_files([staged_parquet(tx, {"dt": "a"})])
                tx.commit()
        assert cat.services.flush()  # checkpoints are written off the commit path
        table.expire(retain_versions=3, retain_duration="0s", force=True)  # the retention record
        table.archive(keep_versions=2)  # the archive marker; checkpoints and times after it stay
        coordinator = cat.services.coordinator
        coordinator.record_event(table.table_id, "t1", {"kind": "conflict"}, ttl=60)
        coordinator.flush_events()
        lease, _ = coordinator.try_lead("operator", "test", 15)
        running = table.begin("insert_into")
        running.register_in_flight()
        # a checkpoint being written (of version 7, which asks for none): its writer is registered until
        # it is registered or abandoned
        with table.begin("insert_into") as tx:
            tx.add_files([staged_parquet(tx, {"dt": "a"})])
            tx.commit()
        staged = cat.services.snapshots.stage_checkpoint(table.snapshot(), "held")
        assert staged is not None
        try:
            under_prefix = cat.settings.etcd.prefix + "/"
            written = [
                m.key.decode().removeprefix(under_prefix) for _, m in coordinator.client.get_prefix(under_prefix)
            ]
        finally:
            staged.abandon()
            running.abort()
            coordinator.resign(lease)

    patterns = documented()
    undocumented = [key for key in written if not any(p.match(key) for p in patterns.values())]
    assert undocumented == []
    never_written = [name for name, p in patterns.items() if not any(p.match(key) for key in written)]
    assert never_written == []
