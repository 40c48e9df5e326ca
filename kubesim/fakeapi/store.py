"""The fake API server's storage: objects, one global resourceVersion, event history, watchers.

Semantics follow etcd + the generic registry: every write bumps one global
integer and stamps it; the event history is bounded and can be compacted,
after which older resourceVersions answer 410 Expired; lists are served in
key order (namespace, name) from consistent snapshots, so `continue` pages
and `resourceVersionMatch=Exact` show the state at that resourceVersion
(rebuilt by rewinding the history). Stored objects are never mutated after
being stored, which lets snapshots share them and lets each keep its
serialized bytes (orjson) for every list and watch that sends it.

Everything here is synchronous and runs on the server's event loop: a write
and the delivery of its event to every open watcher happen in one step, so
a watch that starts from resourceVersion N sees exactly the events after N.
"""

from __future__ import annotations

import asyncio
import base64
import bisect
import builtins
import copy
import re
import secrets
import string
import uuid
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson

from kubesim.fakeapi import field_errors
from kubesim.fakeapi.patch import PatchError, json_patch, merge_patch, strategic_merge_patch
from kubesim.fakeapi.registry import Registry, ResourceType
from kubesim.fakeapi.selectors import Matcher

ObjKey = tuple[str, str]  # (namespace or "", name)

_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")

REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class ApiError(Exception):
    """An API error: answered over HTTP as a `kind: Status`, raised as is by the Python helpers."""

    def __init__(
        self,
        code: int,
        message: str,
        reason: str | None = None,
        *,
        details: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(f"{code} {reason or REASONS.get(code, '')}: {message}")
        self.code = code
        self.reason = reason or REASONS.get(code, "Unknown")
        self.message = message
        self.details = details
        self.headers = headers or {}

    @property
    def status(self) -> int:
        return self.code

    def body(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details:
            out["details"] = self.details
        return out


def _details(t: ResourceType, name: str) -> dict[str, Any]:
    d: dict[str, Any] = {"name": name, "kind": t.plural}
    if t.group:
        d["group"] = t.group
    return d


def not_found(t: ResourceType, name: str) -> ApiError:
    return ApiError(404, f'{t.resource_name()} "{name}" not found', "NotFound", details=_details(t, name))


def conflict(t: ResourceType, name: str, why: str) -> ApiError:
    return ApiError(409, f'Operation cannot be fulfilled on {t.resource_name()} "{name}": {why}', "Conflict", details=_details(t, name))


def invalid(t: ResourceType, name: str, why: Any) -> ApiError:
    """422 Invalid, named as the real server names it (`Kind.group "name" is invalid: ...`).

    `why` is a message, or field errors (str() `field: detail`, `.cause()`) that also become `details.causes`.
    """
    kind = f"{t.kind}.{t.group}" if t.group else t.kind
    details = _details(t, name)
    if isinstance(why, list):
        details["causes"] = [e.cause() for e in why]
        why = str(why[0]) if len(why) == 1 else "[" + ", ".join(str(e) for e in why) + "]"
    return ApiError(422, f'{kind} "{name}" is invalid: {why}', "Invalid", details=details)


TOTAL_ANNOTATION_SIZE_LIMIT = 256 * 1024  # apimachinery's TotalAnnotationSizeLimitB


def check_annotations_size(t: ResourceType, name: str, meta: dict[str, Any]) -> None:
    """422 when the annotations' keys and values add up to more than 256 KiB (bytes), as ValidateObjectMeta says on any write."""
    annotations = meta.get("annotations")
    if not isinstance(annotations, dict):
        return
    total = sum(len(str(k).encode()) + len(str(v).encode()) for k, v in annotations.items())
    if total > TOTAL_ANNOTATION_SIZE_LIMIT:
        raise invalid(t, name, [field_errors.too_long("metadata.annotations", TOTAL_ANNOTATION_SIZE_LIMIT)])


def too_large(rv: int, current: int) -> ApiError:
    """504 for a resourceVersion the store has not reached yet (the client retries after a second)."""
    return ApiError(
        504,
        f"Too large resource version: {rv}, current: {current}",
        "Timeout",
        details={"causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}], "retryAfterSeconds": 1},
    )


def expired(message: str) -> ApiError:
    return ApiError(410, message, "Expired")


class Stored:
    """One immutable stored object version, with its serializations cached."""

    __slots__ = ("_enc", "key", "obj")

    def __init__(self, obj: dict[str, Any], key: ObjKey) -> None:
        self.obj = obj
        self.key = key
        self._enc: dict[tuple[str, bool], bytes] = {}

    @property
    def rv(self) -> int:
        return int(self.obj["metadata"]["resourceVersion"])

    def encode(self, api_version: str, with_type: bool = True) -> bytes:
        """The object as sent at `api_version`; list items of built-in kinds carry no kind/apiVersion."""
        ck = (api_version, with_type)
        data = self._enc.get(ck)
        if data is None:
            obj = self.obj
            if not with_type:
                obj = {k: v for k, v in obj.items() if k != "kind" and k != "apiVersion"}
            elif obj.get("apiVersion") != api_version:
                obj = {**obj, "apiVersion": api_version}
            data = orjson.dumps(obj)
            self._enc[ck] = data
        return data

    def copy(self) -> dict[str, Any]:
        obj: dict[str, Any] = orjson.loads(orjson.dumps(self.obj))
        return obj


@dataclass(slots=True)
class Event:
    rv: int
    key: tuple[str, str]  # the storage (group, plural)
    type: str  # ADDED / MODIFIED / DELETED
    new: Stored
    old: Stored | None


class Watcher:
    """One open watch: its filters and the queue of encoded lines waiting to be sent."""

    CLOSE = b""  # sentinel: end the stream cleanly
    DROP = b"!"  # sentinel: cut the connection

    def __init__(self, t: ResourceType, version: str, namespace: str | None, match: Matcher | None) -> None:
        self.type = t
        self.version = version
        self.api_version = t.api_version(version)
        self.namespace = namespace
        self.match = match
        self.queue: asyncio.Queue[bytes] = asyncio.Queue()
        self.sent_rv = 0

    def matches(self, obj: dict[str, Any]) -> bool:
        if self.namespace and (obj.get("metadata") or {}).get("namespace") != self.namespace:
            return False
        return self.match is None or self.match(obj)

    def line(self, etype: str, stored: Stored) -> bytes:
        return b'{"type":"' + etype.encode() + b'","object":' + stored.encode(self.api_version) + b"}\n"

    def offer(self, ev: Event) -> None:
        """Queue the event as this watcher's filter sees it (an object leaving the filter is DELETED)."""
        new_match = self.matches(ev.new.obj)
        etype: str | None = ev.type
        if ev.type == "MODIFIED":
            old_match = ev.old is not None and self.matches(ev.old.obj)
            if new_match and old_match:
                etype = "MODIFIED"
            elif new_match:
                etype = "ADDED"
            elif old_match:
                etype = "DELETED"
            else:
                etype = None
        elif not new_match:
            etype = None
        if etype is not None:
            self.queue.put_nowait(self.line(etype, ev.new))

    def close(self, abrupt: bool = False) -> None:
        self.queue.put_nowait(self.DROP if abrupt else self.CLOSE)


def encode_continue(rv: int, start: ObjKey) -> str:
    raw = orjson.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": f"{start[0]}/{start[1]}"})
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_continue(token: str) -> tuple[int, ObjKey]:
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        data = orjson.loads(raw)
        ns, _, name = data["start"].partition("/")
        return int(data["rv"]), (ns, name)
    except (ValueError, KeyError, TypeError, orjson.JSONDecodeError) as e:
        raise ApiError(400, f"continue key is not valid: {e}", "BadRequest") from e


def _without_rv(obj: dict[str, Any]) -> dict[str, Any]:
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k not in ("resourceVersion", "managedFields")}
    return {**obj, "metadata": meta}


def _content(obj: dict[str, Any]) -> dict[str, Any]:
    """What `metadata.generation` tracks: everything but metadata and status."""
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "kind", "apiVersion")}


IMMUTABLE_META = ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation")


class Store:
    def __init__(self, registry: Registry, *, history_limit: int = 100_000, start_rv: int = 1000) -> None:
        self.registry = registry
        self.rv = start_rv
        self.history_limit = history_limit
        self.objects: dict[tuple[str, str], dict[ObjKey, Stored]] = {}
        self._hist: list[Event] = []
        self._hist_rvs: list[int] = []
        self.history_start = start_rv  # a watch or list from resourceVersion >= this is served
        self.watchers: dict[tuple[str, str], set[Watcher]] = {}
        self._snapshots: OrderedDict[tuple[tuple[str, str], int], tuple[list[ObjKey], list[Stored]]] = OrderedDict()
        self.auto_create_namespaces = True
        # (group, plural) -> callbacks (event type, object) run on every committed change, e.g. CRDs serving kinds.
        self.observers: dict[tuple[str, str], list[Any]] = {}

    # ------------------------------------------------------------------ plumbing

    def table(self, t: ResourceType) -> dict[ObjKey, Stored]:
        return self.objects.setdefault(t.key, {})

    def _bump(self) -> int:
        self.rv += 1
        return self.rv

    def _emit(self, t: ResourceType, etype: str, new: Stored, old: Stored | None) -> None:
        for observe in self.observers.get(t.key, ()):
            observe(etype, new.obj)
        ev = Event(new.rv, t.key, etype, new, old)
        self._hist.append(ev)
        self._hist_rvs.append(ev.rv)
        if len(self._hist) > self.history_limit * 5 // 4:
            drop = len(self._hist) - self.history_limit
            self.history_start = self._hist_rvs[drop - 1]
            del self._hist[:drop]
            del self._hist_rvs[:drop]
        for w in tuple(self.watchers.get(t.key, ())):
            w.offer(ev)

    def _commit(self, t: ResourceType, obj: dict[str, Any], old: Stored | None) -> Stored:
        meta = obj["metadata"]
        meta["resourceVersion"] = str(self._bump())
        key = (meta.get("namespace", "") if t.namespaced else "", meta["name"])
        stored = Stored(obj, key)
        self.table(t)[key] = stored
        self._emit(t, "ADDED" if old is None else "MODIFIED", stored, old)
        return stored

    def _remove(self, t: ResourceType, old: Stored, final: dict[str, Any] | None = None) -> Stored:
        obj = dict(final if final is not None else old.obj)
        obj["metadata"] = {**obj["metadata"], "resourceVersion": str(self._bump())}
        gone = Stored(obj, old.key)
        del self.table(t)[old.key]
        self._emit(t, "DELETED", gone, old)
        return gone

    def compact(self) -> int:
        """Forget all history: watches and continue tokens from older resourceVersions get 410."""
        self.history_start = self.rv
        self._hist.clear()
        self._hist_rvs.clear()
        self._snapshots.clear()
        return self.rv

    def _key(self, t: ResourceType, namespace: str | None, name: str) -> ObjKey:
        return ((namespace or "") if t.namespaced else "", name)

    def lookup(self, t: ResourceType, namespace: str | None, name: str) -> Stored | None:
        return self.table(t).get(self._key(t, namespace, name))

    def require(self, t: ResourceType, namespace: str | None, name: str) -> Stored:
        s = self.lookup(t, namespace, name)
        if s is None:
            raise not_found(t, name)
        return s

    # ------------------------------------------------------------------ create

    def create(
        self,
        t: ResourceType,
        obj: dict[str, Any],
        *,
        version: str | None = None,
        namespace: str | None = None,
        http: bool = True,
        dry_run: bool = False,
    ) -> Stored:
        """POST semantics; `http=False` (the Python helpers) keeps a given status and skips validation."""
        if not isinstance(obj, dict):
            raise ApiError(400, "the body of the request is not an object", "BadRequest")
        version = version or t.versions[0]
        want_av = t.api_version(version)
        if obj.get("apiVersion") and obj["apiVersion"] != want_av and http:
            raise ApiError(
                400, f"the API version in the data ({obj['apiVersion']}) does not match the expected API version ({want_av})", "BadRequest"
            )
        if obj.get("kind") and obj["kind"] != t.kind:
            raise ApiError(400, f"the kind in the data ({obj['kind']}) does not match the expected kind ({t.kind})", "BadRequest")
        meta = obj.get("metadata")
        if meta is None:
            meta = obj["metadata"] = {}
        if not isinstance(meta, dict):
            raise ApiError(400, "metadata must be an object", "BadRequest")
        if t.namespaced:
            body_ns = meta.get("namespace")
            if namespace and body_ns and body_ns != namespace:
                raise ApiError(400, "the namespace of the provided object does not match the namespace sent on the request", "BadRequest")
            meta["namespace"] = ns = namespace or body_ns or "default"
        else:
            meta.pop("namespace", None)
            ns = ""
        name = meta.get("name")
        if not name:
            if meta.get("generateName"):
                suffix = "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(5))
                name = meta["name"] = meta["generateName"] + suffix
            else:
                raise invalid(t, "", "metadata.name: Required value: name or generateName is required")
        if (
            not isinstance(name, str)
            or len(name) > 253
            or not _SUBDOMAIN.match(name)
            or (t.plural == "namespaces" and (len(name) > 63 or not _LABEL.match(name)))
        ):
            raise invalid(
                t,
                str(name),
                f"metadata.name: Invalid value: {name!r}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
            )
        if (ns, name) in self.table(t):
            raise ApiError(409, f'{t.resource_name()} "{name}" already exists', "AlreadyExists", details=_details(t, name))
        if t.namespaced:
            self._ensure_namespace(ns, dry_run)
        if http:
            if t.has_status and t.plural not in ("nodes",):
                obj.pop("status", None)  # before validation, as the server's PrepareForCreate
            check_annotations_size(t, name, meta)
            if t.validate is not None:
                why = t.validate(None, obj)
                if why:
                    raise invalid(t, name, why)
            meta.pop("deletionTimestamp", None)
            meta.pop("deletionGracePeriodSeconds", None)
        if t.plural == "pods":
            obj.setdefault("status", {}).setdefault("phase", "Pending")
        elif t.plural == "namespaces":
            obj.setdefault("status", {}).setdefault("phase", "Active")
            meta.setdefault("labels", {})["kubernetes.io/metadata.name"] = name
        obj["apiVersion"] = t.api_version(t.versions[0])
        obj["kind"] = t.kind
        meta["uid"] = meta.get("uid") if (not http and meta.get("uid")) else str(uuid.uuid4())
        meta["creationTimestamp"] = meta.get("creationTimestamp") if not http and meta.get("creationTimestamp") else now_rfc3339()
        meta["generation"] = 1
        meta.pop("resourceVersion", None)
        ordered = {"apiVersion": obj.pop("apiVersion"), "kind": obj.pop("kind"), "metadata": obj.pop("metadata"), **obj}
        if dry_run:
            ordered["metadata"]["resourceVersion"] = str(self.rv)
            return Stored(ordered, (ns, name))
        return self._commit(t, ordered, None)

    def _ensure_namespace(self, ns: str, dry_run: bool) -> None:
        nst = self.registry.types[("", "namespaces")]
        if ("", ns) in self.table(nst):
            return
        if not self.auto_create_namespaces:
            raise ApiError(404, f'namespaces "{ns}" not found', "NotFound", details={"name": ns, "kind": "namespaces"})
        if not dry_run:
            self.create(nst, {"metadata": {"name": ns}})

    # ------------------------------------------------------------------ update

    def update(
        self,
        t: ResourceType,
        obj: dict[str, Any],
        *,
        namespace: str | None = None,
        name: str | None = None,
        subresource: str | None = None,
        http: bool = True,
        dry_run: bool = False,
    ) -> Stored:
        """PUT semantics: optimistic concurrency, `/status` isolation, finalizer completion, no-op detection."""
        if not isinstance(obj, dict) or not isinstance(obj.get("metadata", {}), dict):
            raise ApiError(400, "the body of the request is not a Kubernetes object", "BadRequest")
        meta = obj.setdefault("metadata", {})
        name = name or meta.get("name") or ""
        if meta.get("name") and meta["name"] != name:
            raise ApiError(400, f"the name of the object ({meta['name']}) does not match the name on the URL ({name})", "BadRequest")
        if obj.get("kind") and obj["kind"] != t.kind:
            raise ApiError(400, f"the kind in the data ({obj['kind']}) does not match the expected kind ({t.kind})", "BadRequest")
        if t.namespaced:
            namespace = namespace or meta.get("namespace") or "default"
            if meta.get("namespace") and meta["namespace"] != namespace:
                raise ApiError(400, "the namespace of the provided object does not match the namespace sent on the request", "BadRequest")
        current = self.require(t, namespace, name)
        cur = current.obj
        cur_meta = cur["metadata"]
        want_rv = meta.get("resourceVersion")
        if want_rv not in (None, "") and str(want_rv) != cur_meta["resourceVersion"]:
            raise conflict(t, name, "the object has been modified; please apply your changes to the latest version and try again")
        if meta.get("uid") and meta["uid"] != cur_meta["uid"]:
            raise conflict(t, name, f"Precondition failed: UID in precondition: {meta['uid']}, UID in object meta: {cur_meta['uid']}")

        if subresource == "status":
            new = {**cur, "status": obj.get("status")}
            if new["status"] is None:
                new.pop("status")
            new["metadata"] = dict(cur_meta)
            if http and t.validate is not None:  # the whole object is validated, status included
                why = t.validate(cur, new)
                if why:
                    raise invalid(t, name, why)
        else:
            new = dict(obj)
            new_meta = dict(meta)
            for k in IMMUTABLE_META:
                if k in cur_meta:
                    new_meta[k] = cur_meta[k]
                else:
                    new_meta.pop(k, None)
            new_meta["name"] = cur_meta["name"]
            if t.namespaced:
                new_meta["namespace"] = cur_meta["namespace"]
            else:
                new_meta.pop("namespace", None)
            new["metadata"] = new_meta
            if http and t.has_status:
                if "status" in cur:
                    new["status"] = cur["status"]
                else:
                    new.pop("status", None)
            if http:
                check_annotations_size(t, name, new_meta)
            if http and t.validate is not None:
                why = t.validate(cur, new)
                if why:
                    raise invalid(t, name, why)
            if cur_meta.get("deletionTimestamp"):
                added = set(new_meta.get("finalizers") or []) - set(cur_meta.get("finalizers") or [])
                if added:
                    raise invalid(
                        t,
                        name,
                        f"metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers {sorted(added)!r}",
                    )
        new["apiVersion"] = cur["apiVersion"]
        new["kind"] = cur["kind"]
        new = {"apiVersion": new.pop("apiVersion"), "kind": new.pop("kind"), "metadata": new.pop("metadata"), **new}
        if _content(new) != _content(cur):
            new["metadata"]["generation"] = int(cur_meta.get("generation") or 0) + 1
        new["metadata"]["resourceVersion"] = cur_meta["resourceVersion"]
        if _without_rv(new) == _without_rv(cur):
            return current  # a no-op update writes nothing and sends no event, like the real server
        if dry_run:
            return Stored(new, current.key)
        if cur_meta.get("deletionTimestamp") and not new["metadata"].get("finalizers"):
            return self._remove(t, current, new)
        return self._commit(t, new, current)

    def patch(
        self,
        t: ResourceType,
        namespace: str | None,
        name: str,
        patch: Any,
        patch_type: str,
        *,
        subresource: str | None = None,
        http: bool = True,
        dry_run: bool = False,
        version: str | None = None,
    ) -> Stored:
        """PATCH: apply to the current object, then update (a resourceVersion in the patch is a precondition)."""
        current = self.lookup(t, namespace, name)
        if patch_type == "apply":
            if not isinstance(patch, dict):
                raise ApiError(400, "an apply patch must be an object", "BadRequest")
            if current is None:
                body = copy.deepcopy(patch)
                body.setdefault("metadata", {})["name"] = name
                return self.create(t, body, version=version, namespace=namespace, http=http, dry_run=dry_run)
        if current is None:
            raise not_found(t, name)
        base = current.copy()
        try:
            if patch_type == "json":
                result = json_patch(base, patch)
            elif patch_type == "strategic":
                if t.custom:
                    raise ApiError(
                        415,
                        "strategic merge patch is not supported for custom resources; use application/merge-patch+json",
                        "UnsupportedMediaType",
                    )
                if not isinstance(patch, dict):
                    raise PatchError("a strategic merge patch must be an object")
                result = strategic_merge_patch(base, patch)
            else:  # merge and (approximately) apply
                if not isinstance(patch, dict):
                    raise PatchError("a merge patch must be an object")
                result = merge_patch(base, patch)
        except PatchError as e:
            raise invalid(t, name, str(e)) from e
        if not isinstance(result, dict):
            raise invalid(t, name, "the patch does not produce an object")
        result_meta = result.setdefault("metadata", {})
        patch_rv = None
        if isinstance(patch, dict):
            patch_rv = (patch.get("metadata") or {}).get("resourceVersion")
        elif isinstance(patch, list):
            patch_rv = (
                result_meta.get("resourceVersion")
                if result_meta.get("resourceVersion") != current.obj["metadata"]["resourceVersion"]
                else None
            )
        result_meta["resourceVersion"] = patch_rv or current.obj["metadata"]["resourceVersion"]
        return self.update(t, result, namespace=namespace, name=name, subresource=subresource, http=http, dry_run=dry_run)

    # ------------------------------------------------------------------ delete

    def delete(
        self,
        t: ResourceType,
        namespace: str | None,
        name: str,
        *,
        uid: str | None = None,
        resource_version: str | None = None,
        force: bool = False,
        dry_run: bool = False,
    ) -> tuple[Stored, bool]:
        """Delete; with finalizers only mark `deletionTimestamp`. Returns (object, removed now)."""
        current = self.require(t, namespace, name)
        meta = current.obj["metadata"]
        if uid and uid != meta["uid"]:
            raise conflict(t, name, f"Precondition failed: UID in precondition: {uid}, UID in object meta: {meta['uid']}")
        if resource_version and str(resource_version) != meta["resourceVersion"]:
            raise conflict(
                t,
                name,
                f"Precondition failed: ResourceVersion in precondition: {resource_version}, ResourceVersion in meta: {meta['resourceVersion']}",
            )
        if meta.get("finalizers") and not force:
            if meta.get("deletionTimestamp"):
                return current, False
            if dry_run:
                return current, False
            new = {
                **current.obj,
                "metadata": {
                    **meta,
                    "deletionTimestamp": now_rfc3339(),
                    "deletionGracePeriodSeconds": 0,
                    "generation": int(meta.get("generation") or 0) + 1,
                },
            }
            return self._commit(t, new, current), False
        if dry_run:
            return current, True
        return self._remove(t, current), True

    # ------------------------------------------------------------------ pods/binding, pods/eviction

    def bind(self, namespace: str, name: str, binding: dict[str, Any]) -> Stored:
        t = self.registry.types[("", "pods")]
        current = self.require(t, namespace, name)
        meta = current.obj["metadata"]
        bmeta = binding.get("metadata") or {}
        target = (binding.get("target") or {}).get("name")
        bt = self.registry.types[("", "bindings")]
        if not target:
            raise invalid(bt, name, "target.name: Required value")
        if bmeta.get("uid") and bmeta["uid"] != meta["uid"]:
            raise conflict(t, name, f"Precondition failed: UID in precondition: {bmeta['uid']}, UID in object meta: {meta['uid']}")
        if bmeta.get("resourceVersion") and str(bmeta["resourceVersion"]) != meta["resourceVersion"]:
            raise conflict(
                t,
                name,
                f"Precondition failed: ResourceVersion in precondition: {bmeta['resourceVersion']}, ResourceVersion in meta: {meta['resourceVersion']}",
            )
        if meta.get("deletionTimestamp"):
            raise ApiError(
                409,
                f'Operation cannot be fulfilled on pods/binding "{name}": pod {name} is being deleted, cannot be assigned to a host',
                "Conflict",
                details=_details(t, name),
            )
        node = (current.obj.get("spec") or {}).get("nodeName")
        if node:
            raise ApiError(
                409,
                f'Operation cannot be fulfilled on pods/binding "{name}": pod {name} is already assigned to node "{node}"',
                "Conflict",
                details=_details(t, name),
            )
        new = current.copy()
        new.setdefault("spec", {})["nodeName"] = target
        if bmeta.get("annotations"):
            new["metadata"].setdefault("annotations", {}).update(bmeta["annotations"])
        status = new.setdefault("status", {})
        conds = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
        conds.append({"type": "PodScheduled", "status": "True", "lastProbeTime": None, "lastTransitionTime": now_rfc3339()})
        status["conditions"] = conds
        return self._commit(t, new, current)

    # ------------------------------------------------------------------ reads

    def snapshot(self, t: ResourceType, rv: int | None = None) -> tuple[int, list[ObjKey], list[Stored]]:
        """Sorted (keys, objects) of one storage as of `rv` (default: now), rewound from the history."""
        rv = self.rv if rv is None else rv
        if rv > self.rv:
            raise too_large(rv, self.rv)
        if rv < self.history_start and rv != self.rv:
            raise expired(f"too old resource version: {rv} ({self.history_start})")
        ck = (t.key, rv)
        snap = self._snapshots.get(ck)
        if snap is None:
            state = dict(self.table(t))
            if rv != self.rv:
                start = bisect.bisect_right(self._hist_rvs, rv)
                for ev in reversed(self._hist[start:]):
                    if ev.key != t.key:
                        continue
                    if ev.type == "ADDED":
                        state.pop(ev.new.key, None)
                    elif ev.old is not None:
                        state[ev.old.key] = ev.old
            keys = sorted(state)
            snap = (keys, [state[k] for k in keys])
            self._snapshots[ck] = snap
            while len(self._snapshots) > 32:
                self._snapshots.popitem(last=False)
        else:
            self._snapshots.move_to_end(ck)
        return rv, snap[0], snap[1]

    def list(
        self,
        t: ResourceType,
        *,
        namespace: str | None = None,
        match: Matcher | None = None,
        limit: int = 0,
        continue_token: str | None = None,
        resource_version: str | None = None,
        resource_version_match: str | None = None,
    ) -> tuple[int, list[Stored], str | None, int | None]:
        """(list resourceVersion, page, continue token, remaining count) with the real server's RV rules."""
        rv: int | None = None
        start: ObjKey | None = None
        if continue_token:
            if resource_version not in (None, "", "0"):
                raise ApiError(400, "specifying resource version is not allowed when using continue", "BadRequest")
            rv, start = decode_continue(continue_token)
            if rv < self.history_start:
                raise expired(
                    "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list."
                )
        elif resource_version not in (None, ""):
            try:
                want = int(resource_version)
            except ValueError as e:
                raise ApiError(400, f"resourceVersion: Invalid value: {resource_version!r}: must be an integer", "BadRequest") from e
            if resource_version_match == "Exact":
                if want == 0:
                    raise ApiError(
                        400,
                        'resourceVersionMatch: Forbidden: resourceVersionMatch "exact" is forbidden for resourceVersion "0"',
                        "BadRequest",
                    )
                rv = want
            elif want > self.rv:
                self.snapshot(t, want)  # raises 504 Too large resource version
            if want == 0 and resource_version_match != "Exact":
                limit = 0  # served from the watch cache: the real server ignores limit for RV=0
        elif resource_version_match:
            raise ApiError(
                400, "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided", "BadRequest"
            )
        rv, keys, objs = self.snapshot(t, rv)
        i = bisect.bisect_right(keys, start) if start is not None else 0
        out: list[Stored] = []
        n = len(objs)
        ns = namespace if t.namespaced else None
        while i < n:
            s = objs[i]
            i += 1
            if ns and s.key[0] != ns:
                continue
            if match is not None and not match(s.obj):
                continue
            out.append(s)
            if limit and len(out) >= limit:
                break
        token = None
        remaining = None
        if limit and len(out) >= limit and i < n:
            rest = [s for s in objs[i:] if (not ns or s.key[0] == ns) and (match is None or match(s.obj))]
            if rest:
                token = encode_continue(rv, out[-1].key)
                if match is None:
                    remaining = len(rest)
        return rv, out, token, remaining

    # ------------------------------------------------------------------ watch

    def open_watch(
        self,
        t: ResourceType,
        version: str,
        *,
        namespace: str | None,
        match: Matcher | None,
        resource_version: str | None,
        send_initial: bool,
    ) -> Watcher:
        """Register a watcher and queue what it must see first (history after RV, or the current state)."""
        w = Watcher(t, version, namespace if t.namespaced else None, match)
        if resource_version in (None, "", "0") or send_initial:
            if resource_version not in (None, "", "0"):
                self._check_watch_rv(resource_version)
            for s in self.snapshot(t)[2]:
                if w.matches(s.obj):
                    w.queue.put_nowait(w.line("ADDED", s))
        else:
            rv = self._check_watch_rv(resource_version)
            if rv is None:
                w.queue.put_nowait(
                    b'{"type":"ERROR","object":'
                    + orjson.dumps(expired(f"too old resource version: {resource_version} ({self.history_start})").body())
                    + b"}\n"
                )
                w.queue.put_nowait(Watcher.CLOSE)
                return w
            start = bisect.bisect_right(self._hist_rvs, rv)
            for ev in self._hist[start:]:
                if ev.key == t.key:
                    w.offer(ev)
        self.watchers.setdefault(t.key, set()).add(w)
        return w

    def _check_watch_rv(self, resource_version: str) -> int | None:
        try:
            rv = int(resource_version)
        except ValueError as e:
            raise ApiError(400, f"resourceVersion: Invalid value: {resource_version!r}: must be an integer", "BadRequest") from e
        if rv > self.rv:
            raise too_large(rv, self.rv)
        if rv < self.history_start:
            return None
        return rv

    def close_watch(self, w: Watcher) -> None:
        ws = self.watchers.get(w.type.key)
        if ws is not None:
            ws.discard(w)

    def all_watchers(self) -> builtins.list[Watcher]:
        return [w for ws in self.watchers.values() for w in ws]

    def drop_watches(self, *, abrupt: bool = True, keys: Iterable[tuple[str, str]] | None = None, version: str | None = None) -> int:
        wanted = set(keys) if keys is not None else None
        n = 0
        for key, ws in self.watchers.items():
            if wanted is not None and key not in wanted:
                continue
            for w in list(ws):
                if version is not None and w.version != version:
                    continue
                w.close(abrupt)
                ws.discard(w)
                n += 1
        return n
