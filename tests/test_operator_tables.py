"""AcidTable lifecycle on a real kube-apiserver with the operator running as its own process: create
(and adopt), status that follows etcd, an added column, an invalid spec, deletion with Retain and Delete.
Each asserts on the API objects, the Events, etcd and the table."""

from __future__ import annotations

import json

import pytest
from tests.helpers import envtest
from tests.helpers.operator_process import OperatorProcess
from tests.helpers.resources import SPEC, catalog_name, condition, events_for, eventually, get, table_resource
from tests.helpers.tables import staged_parquet

from acidtables import Catalog
from acidtables.errors import MetadataChangedException, TableNotFoundError


def test_a_new_acidtable_becomes_ready_with_its_table_and_status_follows_commits(
    kube_api: envtest.KubeAPI, kube_namespace: str, operator: OperatorProcess, catalog: Catalog
) -> None:
    envtest.apply(kube_api, kube_namespace, table_resource("orders", primaryKey=["id"], conflictPolicy="maxcompute"))
    envtest.kubectl(
        kube_api, "wait", "--for=condition=Ready", "acidtable/orders", "-n", kube_namespace, "--timeout=60s"
    )
    resource = get(kube_api, kube_namespace, "orders")
    status = resource["status"]
    table = catalog.table(catalog_name(kube_namespace, "orders"))
    assert (status["tableId"], status["version"], status["conflictPolicy"]) == (table.table_id, 0, "maxcompute")
    assert status["observedGeneration"] == resource["metadata"]["generation"] == 1
    assert table.metadata.primary_key == ("id",) and table.metadata.partition_by == ("dt",)
    assert any(e["reason"] == "Created" for e in events_for(kube_api, kube_namespace, "orders"))

    with table.begin("insert_into") as tx:  # a writer that is not the operator
        tx.add_files([staged_parquet(tx, {"dt": "2026-11-01"})])
        tx.commit()
    followed = eventually(
        lambda: (
            get(kube_api, kube_namespace, "orders")["status"].get("version") == 1
            and get(kube_api, kube_namespace, "orders")["status"]
        ),
        "the status showing version 1",
        operator,
    )
    assert (followed["files"], followed["lastCommit"]["operation"]) == (1, "INSERT INTO")


def test_adding_a_column_alters_the_table_and_fails_a_concurrent_writer(
    kube_api: envtest.KubeAPI, kube_namespace: str, operator: OperatorProcess, catalog: Catalog
) -> None:
    envtest.apply(kube_api, kube_namespace, table_resource("grows"))
    envtest.kubectl(kube_api, "wait", "--for=condition=Ready", "acidtable/grows", "-n", kube_namespace, "--timeout=60s")
    table = catalog.table(catalog_name(kube_namespace, "grows"))
    writer = table.begin("insert_into")
    writer.add_files([staged_parquet(writer, {"dt": "a"})])

    grown = table_resource("grows")
    grown["spec"]["schema"] = [*SPEC["schema"], {"name": "note", "type": "string"}]
    envtest.apply(kube_api, kube_namespace, grown)
    eventually(
        lambda: get(kube_api, kube_namespace, "grows")["status"].get("observedGeneration") == 2,
        "observedGeneration 2",
        operator,
    )
    assert [c.name for c in catalog.table(table.name).metadata.columns] == ["id", "dt", "amount", "note"]
    with pytest.raises(MetadataChangedException):
        writer.commit()


def test_an_invalid_spec_is_a_condition_and_an_event_not_a_crash(
    kube_api: envtest.KubeAPI, kube_namespace: str, operator: OperatorProcess, catalog: Catalog
) -> None:
    bad = table_resource("broken")
    bad["spec"]["schema"] = [{"name": "id", "type": "bigintt"}]
    bad["spec"]["partitionBy"] = []
    envtest.apply(kube_api, kube_namespace, bad)
    ready = eventually(
        lambda: condition(get(kube_api, kube_namespace, "broken"), "Ready"), "a Ready condition", operator
    )
    assert (ready["status"], ready["reason"]) == ("False", "InvalidSpec")
    assert "bigintt" in ready["message"]
    warning = eventually(
        lambda: [e for e in events_for(kube_api, kube_namespace, "broken") if e["type"] == "Warning"],
        "a Warning event",
        operator,
    )
    assert "bigintt" in warning[0]["message"]
    with pytest.raises(TableNotFoundError):
        catalog.table(catalog_name(kube_namespace, "broken"))
    # the operator still serves other resources
    envtest.apply(kube_api, kube_namespace, table_resource("healthy"))
    envtest.kubectl(
        kube_api, "wait", "--for=condition=Ready", "acidtable/healthy", "-n", kube_namespace, "--timeout=60s"
    )


def test_an_existing_table_with_the_same_definition_is_adopted_and_a_different_one_is_not_touched(
    kube_api: envtest.KubeAPI, kube_namespace: str, operator: OperatorProcess, catalog: Catalog
) -> None:
    same = catalog.create_table(
        catalog_name(kube_namespace, "same"), schema="id BIGINT NOT NULL, dt STRING, amount DOUBLE", partition_by=["dt"]
    )
    other = catalog.create_table(catalog_name(kube_namespace, "other"), schema="id BIGINT")
    envtest.apply(kube_api, kube_namespace, table_resource("same"))
    envtest.apply(kube_api, kube_namespace, table_resource("other"))
    envtest.kubectl(kube_api, "wait", "--for=condition=Ready", "acidtable/same", "-n", kube_namespace, "--timeout=60s")
    assert get(kube_api, kube_namespace, "same")["status"]["tableId"] == same.table_id
    mismatch = eventually(
        lambda: condition(get(kube_api, kube_namespace, "other"), "Ready"), "a Ready condition", operator
    )
    assert (mismatch["status"], mismatch["reason"]) == ("False", "DefinitionMismatch")
    assert "schema: the table has (id BIGINT)" in mismatch["message"]
    assert catalog.table(other.name).metadata.schema_ddl == "id BIGINT"  # never overwritten


@pytest.mark.parametrize("policy", ["Retain", "Delete"])
def test_deletion_honours_the_deletion_policy(
    kube_api: envtest.KubeAPI, kube_namespace: str, operator: OperatorProcess, catalog: Catalog, policy: str
) -> None:
    envtest.apply(kube_api, kube_namespace, table_resource("doomed", deletionPolicy=policy))
    envtest.kubectl(
        kube_api, "wait", "--for=condition=Ready", "acidtable/doomed", "-n", kube_namespace, "--timeout=60s"
    )
    table = catalog.table(catalog_name(kube_namespace, "doomed"))
    with table.begin("insert_into") as tx:
        written = staged_parquet(tx, {"dt": "a"})
        tx.add_files([written])
        tx.commit()
    envtest.kubectl(kube_api, "delete", "acidtable", "doomed", "-n", kube_namespace, "--timeout=60s")
    gone = envtest.kubectl(kube_api, "get", "acidtables", "-n", kube_namespace, "-o", "name")
    assert "doomed" not in gone  # the finalizer was removed once the table was released
    if policy == "Retain":
        assert catalog.table(table.name).version == 1
    else:
        with pytest.raises(TableNotFoundError):
            catalog.table(table.name)
        assert table.storage.file_size(written.path) is None


def test_changing_compaction_settings_is_a_metadata_commit(
    kube_api: envtest.KubeAPI, kube_namespace: str, operator: OperatorProcess, catalog: Catalog
) -> None:
    envtest.apply(kube_api, kube_namespace, table_resource("tuned", compaction={"auto": False}))
    envtest.kubectl(kube_api, "wait", "--for=condition=Ready", "acidtable/tuned", "-n", kube_namespace, "--timeout=60s")
    table = catalog.table(catalog_name(kube_namespace, "tuned"))
    assert json.loads(table.metadata.properties["acidtables.compaction"]) == {"auto": False}
    writer = table.begin("insert_into")
    writer.add_files([staged_parquet(writer, {"dt": "a"})])
    envtest.apply(
        kube_api, kube_namespace, table_resource("tuned", compaction={"auto": True, "minor": {"minSmallFiles": 4}})
    )
    eventually(
        lambda: get(kube_api, kube_namespace, "tuned")["status"].get("observedGeneration") == 2,
        "observedGeneration 2",
        operator,
    )
    properties = catalog.table(table.name).metadata.properties
    assert json.loads(properties["acidtables.compaction"]) == {"auto": True, "minor": {"minSmallFiles": 4}}
    with pytest.raises(MetadataChangedException):  # concurrent writers see the change, as the rules say
        writer.commit()
