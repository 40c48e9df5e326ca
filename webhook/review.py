"""AdmissionReview (admission.k8s.io/v1) in, the answer out: parsed once at the edge, every bad field named.

A review that is not what the API server sends (not an object, another
apiVersion, no uid, a pod whose fields have the wrong types) is a
`wire.BadRequest` naming the field: the HTTP edge answers 400 with it, and
the API server applies the webhook's failurePolicy. Only a well-formed
review gets an AdmissionReview answer, always `allowed` (the webhook only
decides where a pod is scheduled).
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Container, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from allocator.extended_resources import IMPLICIT_PREFIX
from allocator.parse import ValidationError, parse_pod
from allocator.pod_claims import dra_use
from allocator.types import Pod
from serving.bad_request import BadRequest

log = logging.getLogger("dra_extender.webhook")

API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"
DEFAULT_SCHEDULER = "default-scheduler"


@dataclass(frozen=True, slots=True)
class PodReview:
    """What one review asks: `pod` is set for the CREATE of a Pod (the only request the chart registers)."""

    uid: str
    name: str  # namespace/name (or generateName) for the log
    namespace: str
    pod: Pod | None


def _object(value: Any, field: str, *, required: bool = True) -> Mapping[str, Any]:
    if value is None and not required:
        return {}
    if not isinstance(value, dict):
        raise BadRequest(field, f"must be an object, not {_type(value)}")
    return value


def _string(value: Any, field: str, *, required: bool = False) -> str:
    if value is None or value == "":
        if required:
            raise BadRequest(field, "required")
        return ""
    if not isinstance(value, str):
        raise BadRequest(field, f"must be a string, not {_type(value)}")
    return value


def _type(value: Any) -> str:
    return "null" if value is None else {dict: "object", list: "array", str: "string", bool: "boolean"}.get(type(value), "number")


def parse_review(body: bytes) -> PodReview:
    """The review in `body`; BadRequest naming the field when it is not a well-formed admission.k8s.io/v1 review."""
    try:
        review = orjson.loads(body)
    except orjson.JSONDecodeError as e:
        raise BadRequest("", f"bad AdmissionReview: not JSON ({e})") from None
    review = _object(review, "(body)")
    api_version = _string(review.get("apiVersion"), "apiVersion", required=True)
    if api_version != API_VERSION:
        raise BadRequest("apiVersion", f"{api_version!r} is not served; only {API_VERSION} (admissionReviewVersions: [v1])")
    if (kind := _string(review.get("kind"), "kind", required=True)) != KIND:
        raise BadRequest("kind", f"must be {KIND}, not {kind!r}")
    request = _object(review.get("request"), "request")
    uid = _string(request.get("uid"), "request.uid", required=True)
    resource_kind = _object(request.get("kind"), "request.kind")
    kind_name = _string(resource_kind.get("kind"), "request.kind.kind", required=True)
    group = _string(resource_kind.get("group"), "request.kind.group")
    operation = _string(request.get("operation"), "request.operation", required=True)
    namespace = _string(request.get("namespace"), "request.namespace")
    if (group, kind_name) != ("", "Pod") or operation != "CREATE":
        return PodReview(uid, f"{kind_name} {namespace}", namespace, None)
    raw = _object(request.get("object"), "request.object")
    meta = _object(raw.get("metadata"), "request.object.metadata", required=False)
    _object(raw.get("spec"), "request.object.spec", required=False)
    name = _string(meta.get("name"), "request.object.metadata.name") or _string(
        meta.get("generateName"), "request.object.metadata.generateName"
    )
    namespace = namespace or _string(meta.get("namespace"), "request.object.metadata.namespace")
    # A pod made from a generateName has no name yet at admission; parse_pod needs one.
    named = {**raw, "metadata": {**meta, "name": name or "<generated>", "namespace": namespace or "default"}}
    try:
        pod = parse_pod(named)
    except ValidationError as e:
        raise BadRequest(f"request.object.{e.field}" if e.field else "request.object", e.reason) from None
    return PodReview(uid, f"{namespace}/{name}", namespace, pod)


def needs_class_list(review: PodReview, served: Container[str]) -> bool:
    """Whether deciding depends on the DeviceClasses: no claim, and a requested resource no known class names (yet)."""
    pod = review.pod
    if pod is None or dra_use(pod, served) is not None:
        return False
    return any(n not in served and not n.startswith(IMPLICIT_PREFIX) for c in pod.containers_if_extended for n in c.extended)


def decide(review: PodReview, scheduler_name: str, served: Container[str], excluded: Container[str]) -> tuple[list[dict[str, Any]], str]:
    """The JSON patch for a new pod ([] leaves it alone) and why, for the log."""
    pod = review.pod
    if pod is None:
        return [], "not the creation of a pod"
    if pod.node_name:
        return [], "already bound to a node"
    if pod.scheduler_name == scheduler_name:
        return [], "already uses this scheduler"
    if pod.scheduler_name != DEFAULT_SCHEDULER:  # parse_pod reads an empty schedulerName as the default
        return [], f"asks for scheduler {pod.scheduler_name}"
    if review.namespace in excluded:
        return [], f"namespace {review.namespace} is excluded (--excluded-namespace)"
    reason = dra_use(pod, served)
    if reason is None:
        return [], "uses no DRA device"
    return [{"op": "add", "path": "/spec/schedulerName", "value": scheduler_name}], reason


def answer(review: PodReview, patch: list[dict[str, Any]]) -> bytes:
    """The AdmissionReview answer: allowed, with the patch when there is one."""
    response: dict[str, Any] = {"uid": review.uid, "allowed": True}
    if patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(orjson.dumps(patch)).decode()
    return orjson.dumps({"apiVersion": API_VERSION, "kind": KIND, "response": response})


def refusal(review: PodReview, code: int, message: str) -> bytes:
    """An AdmissionReview that refuses the pod (the API server shows `message` to whoever created it)."""
    response = {"uid": review.uid, "allowed": False, "status": {"code": code, "message": message}}
    return orjson.dumps({"apiVersion": API_VERSION, "kind": KIND, "response": response})
