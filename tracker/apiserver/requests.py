"""Every API call the components make, as a value: pure functions build a `Request`, one executor sends it.

The shape of lightkube's client: what a write sends (method, path, body,
content type) is decided here without I/O, so it is tested from tables,
and `ApiWrites.execute` (tracker/apiserver/writes.py) is the one place that
puts a request on the wire and turns a refusal into the SourceError that
names the object (`what`). No module outside tracker/apiserver/ sends a
request of its own (tests/test_write_path.py holds it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tracker import events as ev
from tracker import k8s_events
from tracker.resources import EVENTS, KIND_RESOURCES, Resource

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"  # RFC 7386; the one spelling of it in the components
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"  # core kinds only (a CRD refuses it)
_POD = KIND_RESOURCES[ev.POD]


@dataclass(frozen=True, slots=True)
class Request:
    """One API call: sent as it is by `ApiWrites.execute`; `what` names the object in the error a refusal raises."""

    method: str
    path: str
    body: Any
    what: str
    content_type: str = JSON
    query: tuple[tuple[str, str], ...] = ()


def _ref(namespace: str, name: str) -> str:
    """How an error names an object: namespace/name, or the name of a cluster-scoped one."""
    return f"{namespace}/{name}" if namespace else name


def create(res: Resource, namespace: str, obj: dict[str, Any]) -> Request:
    """POST `obj` to its collection (named by `metadata.name`, else its `generateName`)."""
    meta = obj.get("metadata") or {}
    name = meta.get("name") or meta.get("generateName") or ""
    return Request("POST", res.collection(namespace), obj, f"create {res.kind} {_ref(namespace, name)}")


def patch(
    res: Resource,
    namespace: str,
    name: str,
    body: dict[str, Any],
    *,
    subresource: str = "",
    aspect: str = "",
    content_type: str = MERGE_PATCH,
) -> Request:
    """A patch of an object (or its `subresource`); `aspect` says what it changes, in the error (default: the subresource)."""
    path = res.item(namespace, name) + (f"/{subresource}" if subresource else "")
    detail = aspect or subresource
    return Request("PATCH", path, body, f"patch {res.kind} {_ref(namespace, name)}{' ' + detail if detail else ''}", content_type)


def delete(res: Resource, namespace: str, name: str, uid: str | None = None) -> Request:
    """DELETE an object; with `uid` (even ""), only if it still holds that UID (DeleteOptions preconditions)."""
    body = {} if uid is None else {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}}
    return Request("DELETE", res.item(namespace, name), body, f"delete {res.kind} {_ref(namespace, name)}")


def list_objects(res: Resource, label_selector: str) -> Request:
    """One GET of every object of `res` (cluster-wide) that `label_selector` selects, fresh from the API server."""
    return Request(
        "GET",
        res.collection(),
        None,
        f"list {res.kind} with labelSelector {label_selector}",
        query=(("labelSelector", label_selector),),
    )


def bind_pod(namespace: str, name: str, uid: str, node: str) -> Request:
    """The pod's Binding to `node` (with its UID, when known, as a precondition)."""
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": name, "namespace": namespace, **({"uid": uid} if uid else {})},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }
    return Request("POST", _POD.item(namespace, name) + "/binding", binding, f"bind Pod {namespace}/{name}")


def evict_pod(namespace: str, name: str, uid: str) -> Request:
    """The Eviction API's request for the pod (it honours PodDisruptionBudgets)."""
    body = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": name, "namespace": namespace},
        "deleteOptions": {"preconditions": {"uid": uid}},
    }
    return Request("POST", _POD.item(namespace, name) + "/eviction", body, f"evict Pod {namespace}/{name}")


def event(event: dict[str, Any]) -> Request:
    """Create the core/v1 Event for `event` ({type, reason, message, involvedObject}) in the object's namespace."""
    body = k8s_events.event_object(event)
    return Request("POST", EVENTS.collection(body["metadata"]["namespace"]), body, "create Event")
