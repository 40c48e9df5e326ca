"""A device's ladder state ↔ the DeviceTaintRule that carries it.

One rule of the project's CRD per (policy, rule, device): named
deterministically, labelled with the policy and rule, owned by the policy
(deleting the policy deletes its rules), its taint the rung's effect (None
in dry run), and the ladder's state in an annotation, so that a restart or
a new leader reads back exactly where each device was. There is no other
store. The annotation `PIN` on the rule, set by an operator, keeps the
device from being cleared.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

import orjson

from allocator.types import DeviceID
from controllers.health.alerts import alert_key
from controllers.health.ladder import ACTIVE_KEPT, CAUSE_KEPT, OCCURRENCES_KEPT, DeviceState
from controllers.health.policy import GROUP, KIND, VERSION

POLICY_LABEL = "resource.dra-extender.io/health-policy"
RULE_LABEL = "resource.dra-extender.io/health-rule"
STATE = "resource.dra-extender.io/health-state"
PIN = "resource.dra-extender.io/health-pin"

_UNSAFE = re.compile(r"[^a-z0-9-]+")


def label_value(name: str) -> str:
    """A name as a label value (at most 63 characters; longer ones keep a hash of the rest)."""
    if len(name) <= 63:
        return name
    return name[:52] + "-" + hashlib.sha256(name.encode()).hexdigest()[:10]


def rule_name(policy: str, rule: str, did: DeviceID) -> str:
    """Deterministic and a DNS subdomain: policy.rule.device-hash."""
    device = _UNSAFE.sub("-", did.device.lower()).strip("-")[:40] or "device"
    digest = hashlib.sha256(f"{did.driver}\x00{did.pool}\x00{did.device}".encode()).hexdigest()[:10]
    head = f"{policy}.{rule}"[: 253 - len(device) - len(digest) - 2]
    return f"{head}.{device}-{digest}"


@dataclass(frozen=True, slots=True)
class Owned:
    """One of our rules as read back from the API."""

    name: str
    uid: str
    resource_version: str
    policy: str
    rule: str
    did: DeviceID
    node: str
    state: DeviceState
    effect: str
    pinned: bool


def encode_state(state: DeviceState, node: str) -> str:
    """The state annotation: bounded as the state is (at most 32 KiB, docs/health.md, Bounded state)."""
    doc: dict[str, Any] = {
        "node": node,
        "firstSeen": state.first_seen,
        "active": sorted(state.active),
        "occurrences": list(state.occurrences),
        "step": state.step,
        "resolvedAt": state.resolved_at,
        "noExecuteAt": state.no_execute_at,
        "cause": state.cause,
        "lastSignal": state.last_signal,
    }
    if state.overflow:
        doc["overflow"] = state.overflow
        doc["retired"] = sorted(state.retired)
    return orjson.dumps(doc).decode()


def _signal(key: str) -> str:
    """A signal key as this version keeps it (an earlier one kept a long alert fingerprint whole)."""
    return alert_key(key[6:]) if key.startswith("alert:") else key


def decode_state(s: dict[str, Any]) -> DeviceState:
    """The annotation's JSON back into a bounded state.

    An annotation of an earlier version may hold any number of signals and
    occurrences: past the bounds, the newest occurrences are kept (the ladder's
    counts stay exact) and the signals beyond ACTIVE_KEPT are counted as
    overflow (the device keeps firing until they resolve), as `ladder.apply` would have.
    """
    overflow = int(s.get("overflow") or 0)
    if overflow < 0:
        raise ValueError(f"overflow {overflow} is negative")
    retired = sorted({_signal(str(a)) for a in s.get("retired") or ()}) if overflow else []
    active = [a for a in sorted({_signal(str(a)) for a in s.get("active") or ()}) if a not in retired]
    room = max(0, ACTIVE_KEPT - len(retired))
    overflow += max(0, len(active) - room)
    return DeviceState(
        first_seen=float(s["firstSeen"]),
        active=frozenset(active[:room]),
        occurrences=tuple(float(t) for t in s.get("occurrences") or ())[-OCCURRENCES_KEPT:],
        step=int(s.get("step", -1)),
        resolved_at=None if s.get("resolvedAt") is None else float(s["resolvedAt"]),
        no_execute_at=None if s.get("noExecuteAt") is None else float(s["noExecuteAt"]),
        cause=str(s.get("cause") or "")[:CAUSE_KEPT],
        last_signal=float(s.get("lastSignal") or 0.0),
        overflow=overflow,
        retired=frozenset(retired[:ACTIVE_KEPT]),
    )


def decode(obj: dict[str, Any]) -> Owned | None:
    """Our rule back into its state; None if it is not ours or its annotation is unreadable."""
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    if POLICY_LABEL not in labels or STATE not in annotations:
        return None
    try:
        s = orjson.loads(annotations[STATE])
        sel = obj["spec"]["deviceSelector"]
        state = decode_state(s)
        did = DeviceID(sel["driver"], sel["pool"], sel["device"])
        return Owned(
            name=meta["name"],
            uid=meta.get("uid", ""),
            resource_version=meta.get("resourceVersion", ""),
            policy=labels[POLICY_LABEL],
            rule=labels.get(RULE_LABEL, ""),
            did=did,
            node=str(s.get("node") or ""),
            state=state,
            effect=obj["spec"]["taint"]["effect"],
            pinned=annotations.get(PIN, "").lower() == "true",
        )
    except (KeyError, TypeError, ValueError, orjson.JSONDecodeError):
        return None


def rule_object(
    *, policy: str, policy_uid: str, rule: str, did: DeviceID, node: str, key: str, value: str, effect: str, state: DeviceState
) -> dict[str, Any]:
    """The whole DeviceTaintRule for one device (created once, then patched)."""
    taint = {"key": key, "effect": effect, **({"value": value} if value else {})}
    return {
        "apiVersion": f"{GROUP}/v1alpha1",
        "kind": "DeviceTaintRule",
        "metadata": {
            "name": rule_name(policy, rule, did),
            "labels": {
                POLICY_LABEL: label_value(policy),
                RULE_LABEL: label_value(rule),
                "app.kubernetes.io/managed-by": "dra-extender-health",
            },
            "annotations": {STATE: encode_state(state, node)},
            "ownerReferences": [{"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "name": policy, "uid": policy_uid, "controller": True}],
        },
        "spec": {"deviceSelector": {"driver": did.driver, "pool": did.pool, "device": did.device}, "taint": taint},
    }
