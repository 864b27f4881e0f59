"""Found by the history checker (issue 10, seeds 1 and 2): a commit whose answer was lost because
another thread of the same process replaced the etcd client (closing its channel under the call) was
reported as failed (CoordinatorRefused) although it had landed. Now a client is never closed under a
call, a closed channel or a cancelled call is a lost answer, looked up by txn id, and a lookup that
cannot be answered makes the outcome unknown, never failed."""

from __future__ import annotations

from typing import Any

import pyetcd
import pytest
from tests.jobs import stage

from acidtables import Catalog
from acidtables.core.coordination import etcd_txn
from acidtables.core.errors import CommitOutcomeUnknown, CoordinatorRefused


def _once(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str, error: Exception, *, after: bool) -> list[int]:
    """Make the next call of <owner>.<name> raise `error`, before or after it ran."""
    original = getattr(owner, name)
    calls: list[int] = []

    def failing(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            if after:
                original(*args, **kwargs)
            raise error
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, failing)
    return calls


def test_a_commit_whose_answer_died_with_its_channel_is_found_landed(
    catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = catalog.create_table("ns.t", schema="id BIGINT, dt STRING", partition_by=["dt"])
    tx = table.begin("insert_into")
    tx.add_files([stage(tx, "a")])
    calls = _once(monkeypatch, etcd_txn, "send", ValueError("Cannot invoke RPC: Channel closed!"), after=True)
    info = tx.commit()
    assert len(calls) == 1  # the commit's one transaction, whose answer died
    assert info.version == 1 and table.find_commit(tx.txn_id) == 1
    assert [h.version for h in table.history()] == [1, 0]


def test_requests_retry_a_closed_channel(catalog: Catalog, monkeypatch: pytest.MonkeyPatch) -> None:
    table = catalog.create_table("ns.r", schema="id BIGINT")
    calls = _once(
        monkeypatch,
        pyetcd.MultiEndpointEtcd3Client,
        "get",
        ValueError("Cannot invoke RPC on closed channel!"),
        after=False,
    )
    assert table.version == 0 and len(calls) == 2


def test_a_lookup_that_is_refused_makes_the_outcome_unknown(catalog: Catalog, monkeypatch: pytest.MonkeyPatch) -> None:
    table = catalog.create_table("ns.u", schema="id BIGINT, dt STRING", partition_by=["dt"])
    tx = table.begin("insert_into")
    tx.add_files([stage(tx, "a")])
    _once(monkeypatch, etcd_txn, "send", ValueError("Cannot invoke RPC: Channel closed!"), after=False)
    monkeypatch.setattr(
        "acidtables.core.log.tablelog.TableLog.find_txn",
        lambda self, txn_id: (_ for _ in ()).throw(CoordinatorRefused("etcd refused a transaction lookup")),
    )
    with pytest.raises(CommitOutcomeUnknown, match="find_commit"):
        tx.commit()
