"""The CRDs' rules without an API server: each `x-kubernetes-validations` rule in crds/ evaluated by a CEL
library (cel-python), after the structural schema, against the examples and hand-made broken specs.

CI cannot run a kube-apiserver (../shared/envtest/README.md); tests/test_crds.py asks a real one where
KUBEBUILDER_ASSETS is set. This module does what the server does with a resource, in the same order:
fill in the schema's defaults, check the structural schema (types, enums, patterns, bounds, required),
then evaluate every rule on the value at its node, with `oldSelf` (transition rules) only on an update
where the old object has that node. cel-python has every function the rules use (has, size, all, exists,
the ternary operator, equality of lists and maps), so no shim is needed; a test compiles every rule so a
new rule using one it lacks fails here first, by name.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import celpy
import jsonschema  # type: ignore[import-untyped]
import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml  # type: ignore[import-untyped]
from celpy import celtypes
from celpy.adapter import json_to_cel
from celpy.evaluation import CELEvalError
from tests.helpers.crd_specs import job, table

ROOT = Path(__file__).resolve().parents[1]
CRDS = ROOT / "crds"
CHART_CRDS = ROOT / "charts" / "acidtables" / "files" / "crds"
EXAMPLES = ROOT / "examples"


@dataclass(frozen=True)
class Rule:
    kind: str
    path: tuple[str, ...]  # the properties from the object's root down to the node the rule is on
    rule: str
    message: str

    @property
    def transition(self) -> bool:
        return "oldSelf" in self.rule


def schemas() -> dict[str, dict[str, Any]]:
    """Each kind's openAPIV3Schema (one served version per CRD)."""
    out: dict[str, dict[str, Any]] = {}
    for path in sorted(CRDS.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        (version,) = crd["spec"]["versions"]
        out[crd["spec"]["names"]["kind"]] = version["schema"]["openAPIV3Schema"]
    return out


SCHEMAS = schemas()


def rules_under(kind: str, schema: dict[str, Any], path: tuple[str, ...] = ()) -> Iterator[Rule]:
    for validation in schema.get("x-kubernetes-validations", []):
        yield Rule(kind, path, validation["rule"], validation["message"])
    for name, sub in schema.get("properties", {}).items():
        yield from rules_under(kind, sub, (*path, name))
    if "items" in schema:
        # a rule under an array's items runs on each element; none exists today, and the walk in
        # violations() would need the element's index in its path before one could
        assert not list(rules_under(kind, schema["items"], path)), f"{kind}: a rule on list items at {path}"


RULES = [rule for kind, schema in SCHEMAS.items() for rule in rules_under(kind, schema)]
ENVIRONMENT = celpy.Environment()
PROGRAMS = {rule: ENVIRONMENT.program(ENVIRONMENT.compile(rule.rule)) for rule in RULES}


def with_defaults(value: Any, schema: dict[str, Any]) -> Any:
    """`value` with the schema's defaults filled in, as the API server does before validating."""
    if isinstance(value, dict):
        out = {k: with_defaults(v, schema.get("properties", {}).get(k, {})) for k, v in value.items()}
        for name, sub in schema.get("properties", {}).items():
            if name not in out and "default" in sub:
                out[name] = copy.deepcopy(sub["default"])
        return out
    if isinstance(value, list) and "items" in schema:
        return [with_defaults(v, schema["items"]) for v in value]
    return value


def at(obj: Any, path: tuple[str, ...]) -> Any:
    for name in path:
        if not isinstance(obj, dict) or name not in obj:
            return None
        obj = obj[name]
    return obj


def violations(resource: dict[str, Any], old: dict[str, Any] | None = None) -> list[str]:
    """The messages the API server would refuse `resource` with (an update of `old`, if given).

    A structural-schema failure is returned alone, as the server does not run rules on an object its
    schema refuses; a rule that fails to evaluate counts as failed, as it does on the server.
    """
    schema = SCHEMAS[resource["kind"]]
    new = with_defaults(resource, schema)
    try:
        jsonschema.Draft7Validator(schema).validate(new)
    except jsonschema.ValidationError as error:
        return [f"schema: {error.message}"]
    previous = with_defaults(old, schema) if old is not None else None
    failed: list[str] = []
    for rule in (r for r in RULES if r.kind == resource["kind"]):
        self_value, old_value = at(new, rule.path), at(previous, rule.path)
        if self_value is None or (rule.transition and old_value is None):
            continue  # the server runs a rule only where its node exists; oldSelf only on updates
        activation = {"self": json_to_cel(self_value)}
        if rule.transition:
            activation["oldSelf"] = json_to_cel(old_value)
        try:
            passed: celtypes.Value | None = PROGRAMS[rule].evaluate(activation)
        except CELEvalError:
            passed = None
        if not (isinstance(passed, celtypes.BoolType) and bool(passed)):
            failed.append(rule.message)
    return failed


def changed(resource: dict[str, Any], **spec: Any) -> dict[str, Any]:
    out = copy.deepcopy(resource)
    out["spec"].update(spec)
    return out


def examples() -> list[dict[str, Any]]:
    return [d for path in sorted(EXAMPLES.glob("*.yaml")) for d in yaml.safe_load_all(path.read_text()) if d]


def test_the_charts_copy_of_the_crds_is_crds() -> None:
    copies = {p.name: p.read_text() for p in CHART_CRDS.glob("*.yaml")}
    assert copies == {p.name: p.read_text() for p in CRDS.glob("*.yaml")} and copies


def test_every_rule_compiles_and_both_kinds_have_rules() -> None:
    # PROGRAMS compiled each at import; a function cel-python lacks would have failed there, naming the rule
    assert {rule.kind for rule in RULES} == {"AcidTable", "CompactionJob"}
    assert all(rule.path == ("spec",) for rule in RULES), [r for r in RULES if r.path != ("spec",)]


def custom(resource: dict[str, Any]) -> bool:
    return str(resource["apiVersion"]).startswith("acidtables.io/")


def example_id(resource: dict[str, Any]) -> str:
    return f"{resource['kind']}/{resource['metadata']['name']}"


@pytest.mark.parametrize("example", [d for d in examples() if custom(d)], ids=example_id)
def test_every_example_is_accepted_when_created_and_when_applied_again(example: dict[str, Any]) -> None:
    assert violations(example) == []
    assert violations(example, old=example) == []  # transition rules hold for an unchanged object


@pytest.mark.parametrize("example", [d for d in examples() if not custom(d)], ids=example_id)
def test_every_example_of_a_kubernetes_kind_is_valid_kubernetes_1_36(example: dict[str, Any]) -> None:
    # as tests/test_chart_render.py validates the chart's manifests (kubernetes-validate's v1.36 schemas)
    assert kubernetes_validate.validate(example, "1.36", strict=True) == "1.36"


#: each rule's broken spec, refused with that rule's message (rules checked at create)
REFUSED_AT_CREATE = [
    (table(partitionBy=["day"]), "every partitionBy column must be a column of the schema"),
    (table(primaryKey=["key"]), "every primaryKey column must be a column of the schema"),
    (table(conflictPolicy="maxcompute"), "conflictPolicy maxcompute needs a primaryKey"),
    (table(conflictPolicy="maxcompute", primaryKey=[]), "conflictPolicy maxcompute needs a primaryKey"),
    (table(primaryKey=["id"], isolationLevel="Serializable"), "isolationLevel applies to the delta conflict"),
    (
        table(conflictPolicy="maxcompute-transactional", isolationLevel="WriteSerializable"),
        "isolationLevel applies to the delta conflict",
    ),
    (
        table(conflictPolicy="maxcompute-transactional", rowLevelConcurrency=True),
        "rowLevelConcurrency needs the delta conflict policy",
    ),
    (table(primaryKey=["id"], rowLevelConcurrency=True), "rowLevelConcurrency needs the delta conflict policy"),
    (table(primaryKey=["id"], conflictDetection="statistics"), "conflictDetection applies to the delta conflict"),
    (table(primaryKey=["id"], mirror=["delta"]), "mirror: [delta] is for tables without a primary key"),
    (table(rowLevelConcurrency=True, mirror=["delta"]), "mirror: [delta] is for tables without a primary key"),
    (job(type="cluster"), "clusterBy is required for type cluster and only allowed there"),
    (job(type="cluster", clusterBy=[]), "clusterBy is required for type cluster and only allowed there"),
    (job(clusterBy=["id"]), "clusterBy is required for type cluster and only allowed there"),
]

ORIGINAL = table(primaryKey=["id"], location="/lake/t", conflictPolicy="maxcompute")
#: (old, new, message): each transition rule's refused update
REFUSED_ON_UPDATE = [
    (ORIGINAL, changed(ORIGINAL, partitionBy=[]), "partitionBy is immutable"),
    (table(), changed(table(), partitionBy=None), "partitionBy is immutable"),
    (ORIGINAL, changed(ORIGINAL, primaryKey=["id", "dt"]), "primaryKey is immutable"),
    (ORIGINAL, changed(ORIGINAL, location="/elsewhere"), "location is immutable"),
    (table(), changed(table(), location="/lake/t"), "location is immutable"),  # set after creation
    (ORIGINAL, changed(ORIGINAL, conflictPolicy="maxcompute-transactional"), "conflictPolicy is immutable"),
    (ORIGINAL, changed(ORIGINAL, schema=ORIGINAL["spec"]["schema"][:2]), "schema columns may only be added"),
    (
        ORIGINAL,
        changed(ORIGINAL, schema=[*ORIGINAL["spec"]["schema"][:2], {"name": "amount", "type": "string"}]),
        "schema columns may only be added",
    ),
    (
        ORIGINAL,
        changed(ORIGINAL, schema=[{"name": "id", "type": "bigint"}, *ORIGINAL["spec"]["schema"][1:]]),
        "schema columns may only be added",  # nullable (default true) changed from false
    ),
    (job(), changed(job(), type="major"), "a CompactionJob's spec cannot change once created"),
    (job(), changed(job(), spark={"executors": 2}), "a CompactionJob's spec cannot change once created"),
]


def without_none(resource: dict[str, Any]) -> dict[str, Any]:
    """`changed(..., field=None)` means the field removed."""
    out = copy.deepcopy(resource)
    out["spec"] = {k: v for k, v in out["spec"].items() if v is not None}
    return out


@pytest.mark.parametrize(("resource", "message"), REFUSED_AT_CREATE, ids=[m for _, m in REFUSED_AT_CREATE])
def test_a_broken_spec_is_refused_with_its_rules_message(resource: dict[str, Any], message: str) -> None:
    refused = violations(resource)
    assert len(refused) == 1 and refused[0].startswith(message), refused


@pytest.mark.parametrize(("old", "new", "message"), REFUSED_ON_UPDATE, ids=[m for *_, m in REFUSED_ON_UPDATE])
def test_a_forbidden_change_is_refused_with_its_rules_message(
    old: dict[str, Any], new: dict[str, Any], message: str
) -> None:
    old, new = without_none(old), without_none(new)
    assert violations(old) == [] and violations(new) == [], "each side alone is a valid resource"
    refused = violations(new, old=old)
    assert len(refused) == 1 and refused[0].startswith(message), refused


def test_every_rule_has_a_spec_it_refuses() -> None:
    covered = {m for _, m in REFUSED_AT_CREATE} | {m for *_, m in REFUSED_ON_UPDATE}
    assert [r.message for r in RULES if not any(r.message.startswith(m) for m in covered)] == []


@pytest.mark.parametrize(
    "resource",
    [
        table(conflictPolicy="maxcompute", primaryKey=["id"]),
        table(conflictPolicy="delta", isolationLevel="Serializable", rowLevelConcurrency=True),
        table(isolationLevel="WriteSerializable"),  # no policy, no key: delta by default
        table(primaryKey=["id"], rowLevelConcurrency=False),
        table(primaryKey=["id"], conflictDetection="partitions"),
        table(conflictDetection="statistics"),
        job(type="cluster", clusterBy=["id"]),
        table(mirror=["delta"]),
        table(primaryKey=["id"], mirror=[]),
        job(table="orders-v2"),  # an AcidTable's own name, which automatic compaction writes
        job(table="orders_v2"),  # its catalog spelling
    ],
    ids=[
        "maxcompute with a key",
        "delta options",
        "default delta",
        "row-level off",
        "partitions anywhere",
        "statistics on delta",
        "cluster job",
        "a mirror",
        "mirror off with a key",
        "a table name with a hyphen",
        "its catalog spelling",
    ],
)
def test_a_spec_each_rule_allows_is_accepted(resource: dict[str, Any]) -> None:
    assert violations(resource) == []


def test_adding_a_column_is_an_allowed_change_and_defaults_count_as_written() -> None:
    grown = changed(ORIGINAL, schema=[*ORIGINAL["spec"]["schema"], {"name": "note", "type": "string"}])
    assert violations(grown, old=ORIGINAL) == []
    # `nullable: true` written out equals the default the server fills in for an omitted one
    spelt = copy.deepcopy(ORIGINAL)
    spelt["spec"]["schema"][1]["nullable"] = True
    assert violations(spelt, old=ORIGINAL) == [] and violations(ORIGINAL, old=spelt) == []


def test_the_structural_schema_refuses_before_any_rule_runs() -> None:
    assert violations(table(conflictPolicy="paxos")) == [
        "schema: 'paxos' is not one of ['maxcompute', 'maxcompute-transactional', 'delta']"
    ]
    assert violations(job(spark={"executors": -1}))[0].startswith("schema: -1 is less than the minimum of 0")
