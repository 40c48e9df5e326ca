"""The source interfaces: where cluster state comes from and where writes go.

Narrow protocols, one per job: `ObjectFeed` (run into an EventSink),
`ObjectReader` (fresh reads), `ClaimWriter`, `PodBindWriter`,
`PodEvictionWriter`, `RuleStatusWriter`, `VolumeTaintWriter`,
`OwnRuleWriter`, `PolicyStatusWriter`, `PodLabelWriter` and `EventWriter`.
A consumer declares the ones it uses (`BindingSource`, `EvictionSource`,
`HealthSource` combine them); `Source` is all that both sources serve (the
health writes are the API server's alone).

Two implementations: a manifest directory (`--source DIR`, writes kept in an
in-memory overlay) and the API server (reflectors, writes over HTTP).
"""

from __future__ import annotations

import copy
from typing import Any, Protocol

import orjson

from tracker.events import EventSink


class SourceError(Exception):
    """A write or read the source could not do; `status` mirrors HTTP."""

    status = 500

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ReadOnlyRefused(SourceError):
    """A write `--read-only` refused before sending it: final for the whole process, so never worth a retry."""


class NotFound(SourceError):
    status = 404


class Conflict(SourceError):
    """Stale resourceVersion or failed precondition (HTTP 409)."""

    status = 409


class Invalid(SourceError):
    status = 422


def status_error(status: int, body: bytes, what: str) -> SourceError:
    """The SourceError for an API server's non-success answer: NotFound, Conflict, Invalid, or one with its status."""
    try:
        message = orjson.loads(body).get("message") or body.decode(errors="replace")
    except (orjson.JSONDecodeError, AttributeError):
        message = body.decode(errors="replace")[:500]
    text = f"{what}: HTTP {status}: {message}"
    if status == 404:
        return NotFound(text)
    if status == 409:
        return Conflict(text)
    if status in (400, 422):
        return Invalid(text)
    err = SourceError(text)
    err.status = status
    return err


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: objects merge recursively, null deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


class ObjectFeed(Protocol):
    """Where the tracker's state comes from (what `serve` runs into the ClusterState)."""

    description: str

    async def run(self, sink: EventSink) -> None:
        """Deliver the initial state, mark kinds synced, then follow changes until cancelled."""
        ...


class ObjectReader(Protocol):
    """Fresh reads past the tracker's view (the binder re-reads a pod and its claims before writing)."""

    async def get(self, kind: str, namespace: str, name: str, group: str | None = None) -> dict[str, Any] | None:
        """The freshest copy of one object (None if it does not exist)."""
        ...


class ClaimWriter(Protocol):
    """ResourceClaim writes: allocation, reservation and finalizer patches, extended-resource claims."""

    async def patch_claim(self, namespace: str, name: str, patch: dict[str, Any], *, status: bool = False) -> dict[str, Any]:
        """A JSON merge patch of a ResourceClaim (its finalizers) or, with `status`, of its /status.

        Only what changes is sent, never the whole object (the spec is
        immutable and compared byte-wise by the API server);
        `metadata.resourceVersion` in the patch is a precondition.
        """
        ...

    async def create_claim(self, namespace: str, claim: dict[str, Any]) -> dict[str, Any]:
        """Create a ResourceClaim (a pod's extended-resource claim; `metadata.generateName` names it)."""
        ...

    async def delete_claim(self, namespace: str, name: str, uid: str) -> None:
        """Delete a ResourceClaim with a UID precondition (NotFound when already gone)."""
        ...


class PodBindWriter(Protocol):
    """The binder's pod writes: its extended-resource claim status and its Binding."""

    async def patch_pod_status(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        """A JSON merge patch of a pod's /status (its extendedResourceClaimStatus)."""
        ...

    async def bind_pod(self, namespace: str, name: str, uid: str, node: str) -> None:
        """Create the pod's Binding (uid precondition); Conflict if already bound or uid differs."""
        ...


class PodEvictionWriter(Protocol):
    """The eviction controller's pod writes: the DisruptionTarget condition, then deletion or eviction."""

    async def delete_pod(self, namespace: str, name: str, uid: str) -> None:
        """Delete a pod with a UID precondition (Conflict if the name now holds another pod)."""
        ...

    async def evict_pod(self, namespace: str, name: str, uid: str) -> None:
        """The Eviction API: honours PodDisruptionBudgets (a SourceError with status 429 when one refuses)."""
        ...

    async def update_pod_status_condition(self, namespace: str, name: str, condition: dict[str, Any]) -> None:
        """Set one pod condition (by type) through `pods/status`."""
        ...


class RuleStatusWriter(Protocol):
    """DeviceTaintRule writes of the eviction controller: its status and the taint's timeAdded."""

    async def update_rule_status(self, group: str, name: str, status: dict[str, Any]) -> None:
        """Merge `status` into a DeviceTaintRule's status."""
        ...

    async def update_rule_time_added(self, group: str, name: str, time_added: str) -> None:
        """Set a DeviceTaintRule's `spec.taint.timeAdded`."""
        ...


class VolumeTaintWriter(Protocol):
    """The eviction controller's stamp of a volume taint's timeAdded."""

    async def update_volume_taints(self, kind: str, namespace: str, name: str, text: str) -> None:
        """Rewrite a PVC's or PV's volume-taints annotation."""
        ...


class OwnRuleWriter(Protocol):
    """The project's DeviceTaintRules a controller writes whole (the health controller's, one per failing device)."""

    async def list_own_rules(self, label_selector: str) -> list[dict[str, Any]]:
        """The rules `label_selector` selects, listed fresh from the API server (not the tracker's cache, which may lag)."""
        ...

    async def create_own_rule(self, rule: dict[str, Any]) -> dict[str, Any]:
        """Create a rule (Conflict when one of its name exists)."""
        ...

    async def patch_own_rule(self, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        """A JSON merge patch of a rule (NotFound when it is gone)."""
        ...

    async def delete_own_rule(self, name: str) -> None:
        """Delete a rule (NotFound when already gone)."""
        ...


class PolicyStatusWriter(Protocol):
    """The health controller's DeviceHealthPolicy status."""

    async def update_policy_status(self, name: str, status: dict[str, Any]) -> None:
        """Merge `status` into a DeviceHealthPolicy's status subresource."""
        ...


class PodLabelWriter(Protocol):
    """Labels on one pod: the health leader's own pod, which the alerts Service selects."""

    async def label_pod(self, namespace: str, name: str, labels: dict[str, str | None]) -> None:
        """Merge `labels` into the pod's labels (a None value removes that label)."""
        ...


class EventWriter(Protocol):
    """core/v1 Events about objects, named at the apiVersion this source serves them at."""

    async def create_event(self, event: dict[str, Any]) -> None:
        """Record a core/v1 Event (tracker.k8s_events builds them); a failure is logged, never raised."""
        ...

    def api_version(self, kind: str, group: str) -> str:
        """The apiVersion this source serves `kind` of `group` at (an Event's involvedObject)."""
        ...


class BindingSource(ObjectReader, ClaimWriter, PodBindWriter, EventWriter, Protocol):
    """What /bind reads and writes (extender.bind.binder, and the service that builds the binder)."""


class EvictionSource(PodEvictionWriter, RuleStatusWriter, VolumeTaintWriter, EventWriter, Protocol):
    """What the eviction controller writes (controllers.eviction)."""


class HealthSource(OwnRuleWriter, PolicyStatusWriter, EventWriter, Protocol):
    """What the device-health controller writes (controllers.health); the API server's alone (it needs a cluster)."""


class Source(ObjectFeed, BindingSource, EvictionSource, Protocol):
    """All of it: what `serve` builds (a manifest directory or the API server) and hands out narrowed."""
