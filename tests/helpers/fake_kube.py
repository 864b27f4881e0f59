"""kmock's in-memory Kubernetes API server, with what a real one does that the operator and Spark's
Kubernetes scheduler rely on.

`FakeKube` is kmock's `KubernetesEmulator` (create, patch, delete, list and watch of any resource,
finalizers honoured) plus:
- what the API server fills in on create: uid, creationTimestamp, generation, resourceVersion, a name
  from `generateName` (kopf's Events), a pod's `Pending` phase (Spark reads it at once); a spec change
  makes a new generation;
- label selectors on lists, watches and `deletecollection` (Spark finds and removes its executor pods
  by label; kmock itself ignores `labelSelector`);
- JSON Patch (`application/json-patch+json`, what kopf and Spark's Kubernetes client send) applied to
  the stored object, beside the merge patches kmock understands;
- watches over a WebSocket (Spark's client, fabric8, asks for the upgrade), beside streamed ones;
- a record of every request as (token, verb, resource, namespace) in Kubernetes' RBAC terms, so a test
  can check a client's calls against the rules of a Role (`calls`);
- refusals on demand (`refuse`), with the Status a real API server answers, before anything is stored;
- Namespace objects (the built-in ones from the start), which kmock's own path parser cannot address;
- a list's `kind` and `apiVersion` (`AcidTableList`), without which kubectl refuses the answer.

A merge patch that names `metadata.resourceVersion` lands only on that version (409 Conflict otherwise),
as the API server's optimistic concurrency; other writes always land.

What it still does not do: schema validation and CEL rules (the CRD tests do), authentication and RBAC
(it records, it does not refuse), JSON Patch `test` operations, admission, garbage collection by owner
references, and the kubelet (tests play it).
"""

from __future__ import annotations

import itertools
import json
import re
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import aiohttp.web
import jsonpatch
import kmock
from kmock._internal import parsing as kmock_parsing

GROUP, VERSION = "acidtables.io", "v1alpha1"

VERBS = {"get", "list", "watch", "create", "patch", "delete", "deletecollection"}

#: the resources the operator and Spark's driver read, write or watch, as the emulator's discovery lists them
RESOURCES: dict[str, kmock.ResourceInfo] = {
    f"{GROUP}/{VERSION}/acidtables": kmock.ResourceInfo(
        kind="AcidTable", namespaced=True, subresources={"status"}, verbs=VERBS
    ),
    f"{GROUP}/{VERSION}/compactionjobs": kmock.ResourceInfo(
        kind="CompactionJob", namespaced=True, subresources={"status"}, verbs=VERBS
    ),
    "v1/pods": kmock.ResourceInfo(kind="Pod", namespaced=True, subresources={"status"}, verbs=VERBS),
    "v1/configmaps": kmock.ResourceInfo(kind="ConfigMap", namespaced=True, verbs=VERBS),
    "v1/services": kmock.ResourceInfo(kind="Service", namespaced=True, verbs=VERBS),
    "v1/persistentvolumeclaims": kmock.ResourceInfo(kind="PersistentVolumeClaim", namespaced=True, verbs=VERBS),
    "v1/events": kmock.ResourceInfo(kind="Event", namespaced=True, verbs=VERBS),
    "v1/namespaces": kmock.ResourceInfo(kind="Namespace", namespaced=False, verbs=VERBS),
    "v1/serviceaccounts": kmock.ResourceInfo(kind="ServiceAccount", namespaced=True, verbs=VERBS),
    "rbac.authorization.k8s.io/v1/roles": kmock.ResourceInfo(kind="Role", namespaced=True, verbs=VERBS),
    "rbac.authorization.k8s.io/v1/rolebindings": kmock.ResourceInfo(kind="RoleBinding", namespaced=True, verbs=VERBS),
    "coordination.k8s.io/v1/leases": kmock.ResourceInfo(kind="Lease", namespaced=True, verbs=VERBS),
}


@dataclass
class Refusal:
    """Answer `status` with `message` to requests of `method` whose path matches `path`, `times` times
    (None: every time)."""

    method: str
    path: re.Pattern[str]
    status: int
    reason: str
    message: str
    times: int | None = None


@dataclass(frozen=True)
class Call:
    """One request in RBAC's terms: who (the bearer token), the verb, resource[/subresource], namespace."""

    token: str
    verb: str
    resource: str
    namespace: str | None


# --- label selectors ---------------------------------------------------------------------------------

_SET_TERM = re.compile(r"^\s*([^\s!=]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")


def _terms(selector: str) -> list[str]:
    """A selector's comma-separated terms (commas inside `in (a,b)` belong to the term)."""
    terms, depth, current = [], 0, ""
    for char in selector:
        depth += char == "("
        depth -= char == ")"
        if char == "," and depth == 0:
            terms.append(current)
            current = ""
        else:
            current += char
    return [term.strip() for term in [*terms, current] if term.strip()]


def selects(selector: str, labels: Mapping[str, str]) -> bool:
    """Whether a label selector (Kubernetes' syntax: =, ==, !=, in, notin, key, !key) picks `labels`."""
    for term in _terms(selector):
        found = _SET_TERM.match(term)
        if found:
            key, operator, values = found.groups()
            allowed = {value.strip() for value in values.split(",")}
            if (operator == "in") != (labels.get(key) in allowed):
                return False
        elif "!=" in term:
            key, value = (part.strip() for part in term.split("!=", 1))
            if labels.get(key) == value:
                return False
        elif "=" in term:
            key, value = (part.strip() for part in re.split("==?", term, maxsplit=1))
            if labels.get(key) != value:
                return False
        elif term.startswith("!"):
            if term[1:].strip() in labels:
                return False
        elif term not in labels:
            return False
    return True


def _labels(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return (obj.get("metadata") or {}).get("labels") or {}


# --- JSON Patch -------------------------------------------------------------------------------------


def merge_patch_between(old: Any, new: Any) -> Any:
    """The JSON merge patch (RFC 7386) that turns `old` into `new`: removed keys become null."""
    if not isinstance(old, dict) or not isinstance(new, dict):
        return new
    patch: dict[str, Any] = {key: None for key in old if key not in new}
    for key, value in new.items():
        if key not in old:
            patch[key] = value
        elif old[key] != value:
            patch[key] = merge_patch_between(old[key], value)
    return patch


# --- namespaces as objects ---------------------------------------------------------------------------

_kmock_parse_path = kmock_parsing.parse_path
_NAMESPACE_SUBRESOURCES = {"status", "finalize"}


def parse_path(path: str) -> kmock_parsing.ParsedPath:
    """kmock's path parser, plus the Namespace objects themselves: kmock 0.8 reads `/api/v1/namespaces`
    and `/api/v1/namespaces/<name>` as a namespace scope with nothing after it and fails (a 500), so a
    client listing namespaces (kopf does, whenever it watches given namespaces) got an error no API
    server gives."""
    parts = path.strip("/").split("/")
    if parts[:3] == ["api", "v1", "namespaces"] and (
        len(parts) <= 4 or (len(parts) == 5 and parts[4] in _NAMESPACE_SUBRESOURCES)
    ):
        name = parts[3] if len(parts) > 3 else None
        subresource = parts[4] if len(parts) > 4 else None
        return kmock_parsing.ParsedPath("", "v1", "namespaces", None, name, subresource)
    return _kmock_parse_path(path)


kmock_parsing.parse_path = parse_path  # kmock's Request._parse looks it up on the module at each request

#: the namespaces every API server has
BUILTIN_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


# --- the emulator ------------------------------------------------------------------------------------

_VERB_OF_ACTION = {"LIST": "list", "WATCH": "watch", "FETCH": "get", "CREATE": "create", "UPDATE": "patch"}


class FakeKube(kmock.KubernetesEmulator):
    """kmock's emulator, plus what a real API server fills in, label selectors, JSON Patch, a record of
    the calls, and refusals on demand."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        # the Python client asks for `/version/`, which a real API server answers like `/version`
        self.fallback["get /version/"] << self._serve_server_version
        self.refusals: list[Refusal] = []
        #: every request to a resource, in RBAC's terms
        self.calls: list[Call] = []
        self._versions = itertools.count(1)
        namespaces = kmock.resource(group="", version="v1", plural="namespaces")
        for name in BUILTIN_NAMESPACES:
            metadata = {"name": name, "uid": str(uuid.uuid4()), "resourceVersion": str(next(self._versions))}
            self.objects[namespaces, None, name] = {"apiVersion": "v1", "kind": "Namespace", "metadata": metadata}

    def _record(self, request: Any) -> None:
        if request.resource is None or not request.resource.plural:  # discovery, /version
            return
        method = str(request.method.value)
        action = request.action.value if request.action is not None else ""
        if method == "DELETE":
            verb = "delete" if request.name else "deletecollection"
        elif method == "PUT":
            verb = "update"
        else:
            verb = _VERB_OF_ACTION.get(action, method.lower())
        resource = request.resource.plural + (f"/{request.subresource}" if request.subresource else "")
        authorization = request.headers.get("Authorization") or request.headers.get("authorization") or ""
        token = authorization.removeprefix("Bearer ").strip()
        self.calls.append(Call(token, verb, resource, request.namespace))

    def calls_by(self, token: str) -> set[tuple[str, str]]:
        """(resource, verb) of every request made with `token`."""
        return {(call.resource, call.verb) for call in self.calls if call.token == token}

    async def _handle(self, request: Any) -> Any:
        self._record(request)
        method, path = str(request.method.value), request.url.path
        for refusal in list(self.refusals):
            if refusal.method == method and refusal.path.search(path):
                if refusal.times is not None:
                    refusal.times -= 1
                    if refusal.times <= 0:
                        self.refusals.remove(refusal)
                raise kmock.KubernetesError(
                    status=refusal.status, reason=refusal.reason, message=refusal.message, details={}
                )
        if request.resource is not None and method == "DELETE" and request.name is None:
            return await self._delete_collection(request)
        upgrade = str(request.headers.get("Upgrade") or request.headers.get("upgrade") or "")
        if request.action == kmock.action.WATCH and upgrade.lower() == "websocket":
            return await self._serve_websocket_watch(request)
        if request.resource is not None and method == "PATCH" and isinstance(request.data, list):
            # kmock matches its reactions to this very request object: replace its body in place
            object.__setattr__(request, "data", self._as_merge_patch(request))
        if request.resource is not None and method == "POST" and isinstance(request.data, dict):
            meta = request.data.setdefault("metadata", {})
            if not meta.get("name") and meta.get("generateName"):
                meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
            if request.namespace:
                meta.setdefault("namespace", request.namespace)
            meta.setdefault("uid", str(uuid.uuid4()))
            meta.setdefault("creationTimestamp", datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
            meta.setdefault("generation", 1)
            meta.setdefault("resourceVersion", str(next(self._versions)))
            if request.resource.plural == "pods":  # a new pod is Pending until scheduled and started
                request.data.setdefault("status", {"phase": "Pending"})
        elif request.resource is not None and method == "PATCH" and isinstance(request.data, dict):
            meta = request.data.setdefault("metadata", {})
            expected = meta.pop("resourceVersion", None)
            key = (request.resource, request.namespace, request.name)
            if expected is not None and key in self.objects:
                # a merge patch naming a resourceVersion lands only on that version, as the API server's
                stored = self.objects[key].get("metadata", {}).get("resourceVersion")
                if str(expected) != str(stored):
                    raise kmock.KubernetesError(
                        status=409,
                        reason="Conflict",
                        message=f"Operation cannot be fulfilled on {request.resource.plural} "
                        f'"{request.name}": the object has been modified; please apply your changes to the '
                        "latest version and try again",
                        details={},
                    )
            meta["resourceVersion"] = str(next(self._versions))
            if request.data.get("spec") is not None and key in self.objects:
                # a spec change makes a new generation, as the API server counts it
                current = self.objects[key].get("metadata", {}).get("generation", 1)
                meta["generation"] = int(current) + 1
        return await super()._handle(request)

    def _as_merge_patch(self, request: Any) -> dict[str, Any]:
        """A JSON Patch on the stored object, expressed as the merge patch kmock applies."""
        key = (request.resource, request.namespace, request.name)
        if key not in self.objects or self.objects[key].deleted:
            raise kmock.KubernetesError(status=404, reason="NotFound", message=f"{request.name} not found", details={})
        current = json.loads(json.dumps(self.objects[key].raw))
        # no optimistic concurrency here: kopf's `test` of metadata.resourceVersion always passes
        operations = [op for op in request.data if op.get("op") != "test"]
        try:
            patched = jsonpatch.apply_patch(current, operations)
        except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
            raise kmock.KubernetesError(status=422, reason="Invalid", message=str(exc), details={}) from None
        patch = merge_patch_between(current, patched)
        return patch if isinstance(patch, dict) else {}

    async def _delete_collection(self, request: Any) -> aiohttp.web.StreamResponse:
        """DELETE on a collection: every object of the namespace its labelSelector picks."""
        selector = request.params.get("labelSelector", "")
        deleted = []
        async with self._lock:
            for (resource, namespace, _), obj in list(self.objects.items()):
                if resource != request.resource or obj.deleted:
                    continue
                if request.namespace is not None and namespace != request.namespace:
                    continue
                if not selects(selector, _labels(obj.raw)):
                    continue
                if obj.get("metadata", {}).get("finalizers"):
                    obj.patch({"metadata": {"deletionTimestamp": datetime.now(UTC).isoformat()}})
                    raw, kind = obj.raw, "MODIFIED"
                else:
                    raw, kind = obj.raw, "DELETED"
                    obj.delete()
                await self._buses[resource].put({"type": kind, "object": raw})
                deleted.append(raw)
        return aiohttp.web.json_response({"kind": "List", "apiVersion": "v1", "items": deleted})

    async def _serve_websocket_watch(self, request: Any) -> aiohttp.web.StreamResponse:
        """A watch over a WebSocket, as the API server serves one when asked to upgrade (Spark's
        Kubernetes client asks): each event a text message, the same events as a streamed watch."""
        socket = aiohttp.web.WebSocketResponse()
        await socket.prepare(request._raw_request)
        try:
            async for event in self._serve_watch(request):
                if isinstance(event, dict):
                    await socket.send_str(json.dumps(event))
        except (ConnectionError, RuntimeError):  # the client went away
            pass
        finally:
            await socket.close()
        return socket

    async def _serve_list(self, request: Any) -> Any:
        listed = await super()._serve_list(request)
        resource = request.resource
        info = RESOURCES.get(f"{resource.group + '/' if resource.group else ''}{resource.version}/{resource.plural}")
        if info is not None and isinstance(listed, dict):  # as an API server names a list (kubectl insists)
            listed.setdefault("kind", f"{info.kind}List")
            listed.setdefault("apiVersion", f"{resource.group + '/' if resource.group else ''}{resource.version}")
        selector = request.params.get("labelSelector")
        if selector and isinstance(listed, dict):
            listed["items"] = [item for item in listed["items"] if selects(selector, _labels(item))]
        return listed

    async def _serve_watch(self, request: Any) -> AsyncIterator[Any]:
        selector = request.params.get("labelSelector")
        async for event in super()._serve_watch(request):
            if not selector or not isinstance(event, dict) or selects(selector, _labels(event.get("object") or {})):
                yield event
