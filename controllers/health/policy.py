"""A DeviceHealthPolicy parsed once into frozen values; a faulty one is an error naming the field.

The CRD's schema and CEL rules refuse most mistakes at the API server; this
parser re-checks what the controller relies on, so an object that slipped
past (a manifest, an older CRD) is reported, never half-applied.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from tracker.resources import HEALTH_POLICIES

POLICIES = HEALTH_POLICIES  # optional: the CRD may not be installed
GROUP = POLICIES.group
VERSION = POLICIES.version
KIND = POLICIES.kind

EFFECTS = ("None", "NoSchedule", "NoExecute")
RANK = {"None": 0, "NoSchedule": 1, "NoExecute": 2}
DEFAULT_CLEAR_AFTER = 15 * 60.0

_DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s)?$")


class PolicyError(ValueError):
    """A policy field the controller cannot act on: `field` is its JSON path."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.field = path


def parse_duration(value: Any, path: str) -> float:
    """A Go-style duration ("90s", "5m", "1h30m") in seconds."""
    if not isinstance(value, str) or not value:
        raise PolicyError(path, f"must be a duration such as 5m or 1h30m, got {value!r}")
    m = _DURATION.match(value)
    if m is None or not any(m.groups()):
        raise PolicyError(path, f"must be a duration such as 5m or 1h30m, got {value!r}")
    h, mi, s = (float(g) if g else 0.0 for g in m.groups())
    return h * 3600 + mi * 60 + s


@dataclass(frozen=True, slots=True)
class AlertSignal:
    """Alerts whose labels carry every one of `match_labels`."""

    match_labels: Mapping[str, str]

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in self.match_labels.items())


@dataclass(frozen=True, slots=True)
class TaintSignal:
    """A taint a driver publishes in its ResourceSlice: key, optional values, optional effect."""

    key: str
    values: tuple[str, ...] = ()
    effect: str | None = None

    def matches(self, key: str, value: str, effect: str) -> bool:
        return key == self.key and (not self.values or value in self.values) and (self.effect is None or effect == self.effect)


@dataclass(frozen=True, slots=True)
class ConditionSignal:
    """A Node condition (Node Problem Detector, NVSentinel) of `type` at `status` marks the node's devices."""

    type: str
    status: str = "True"


@dataclass(frozen=True, slots=True)
class DeviceMapping:
    """How an alert's labels name a device.

    `driver` (fixed) or `driver_label`; the node from `node_label`, then the
    device by `attribute` equal to the label `attribute_label`, or by name
    from `device_label`; or `pool_label` + `device_label` directly.
    """

    driver: str = ""
    driver_label: str = ""
    node_label: str = ""
    pool_label: str = ""
    device_label: str = ""
    attribute: str = ""
    attribute_label: str = ""


@dataclass(frozen=True, slots=True)
class Step:
    """One rung: `effect` once the signal has fired for `after` seconds or `occurrences` times within `within`."""

    effect: str
    after: float | None = None
    occurrences: int | None = None
    within: float = 3600.0


@dataclass(frozen=True, slots=True)
class Guard:
    """The most devices one rule may hold at NoExecute, and the most new ones per minute (None: no limit).

    `min_no_execute` is the default guard's floor under the cluster-wide limit (not a policy field): 10 %
    of a fleet of 8 rounds down to 0, and a default that never evicts would defeat the policy.
    """

    max_no_execute: int | None = None
    max_no_execute_percent: float | None = None
    max_per_node: int | None = None
    max_per_node_percent: float | None = None
    max_new_per_minute: int | None = None
    min_no_execute: int = 0

    @property
    def unlimited(self) -> bool:
        """No limit below the whole fleet: every device of the rule may enter NoExecute at once."""
        return (
            self.max_no_execute is None
            and self.max_per_node is None
            and self.max_new_per_minute is None
            and self.max_no_execute_percent in (None, 100)
            and self.max_per_node_percent in (None, 100)
        )

    def fields(self) -> dict[str, int | float]:
        """The limits as the policy spells them (the status and `kubectl dra health` show these)."""
        named = {
            "maxNoExecute": self.max_no_execute,
            "maxNoExecutePercent": self.max_no_execute_percent,
            "maxNoExecutePerNode": self.max_per_node,
            "maxNoExecutePerNodePercent": self.max_per_node_percent,
            "maxNewNoExecutePerMinute": self.max_new_per_minute,
        }
        out = {k: int(v) if isinstance(v, float) and v.is_integer() else v for k, v in named.items() if v is not None}
        if self.min_no_execute:
            out["minNoExecute"] = self.min_no_execute
        return out

    def describe(self) -> str:
        """The limits in words, for people (the policy's status, `kubectl dra health`)."""
        parts = []
        if self.max_no_execute is not None:
            parts.append(f"at most {self.max_no_execute}")
        if self.max_no_execute_percent is not None:
            floor = f" (at least {self.min_no_execute})" if self.min_no_execute else ""
            parts.append(f"{self.max_no_execute_percent:g}% of the rule's devices{floor}")
        if self.max_per_node is not None:
            parts.append(f"{self.max_per_node} per node")
        if self.max_per_node_percent is not None:
            parts.append(f"{self.max_per_node_percent:g}% of a node's devices")
        if self.max_new_per_minute is not None:
            parts.append(f"{self.max_new_per_minute} new per minute")
        return ", ".join(parts) + " at NoExecute" if not self.unlimited else "no limit at NoExecute"


# A rule that can reach NoExecute and sets no guard gets this one: a mass failure never evicts the fleet.
DEFAULT_GUARD = Guard(max_no_execute_percent=10, max_per_node=1, max_new_per_minute=1, min_no_execute=1)


@dataclass(frozen=True, slots=True)
class Rule:
    name: str
    kind: Literal["alert", "driverTaint", "nodeCondition"]
    alert: AlertSignal | None
    taint_signal: TaintSignal | None
    condition: ConditionSignal | None
    device: DeviceMapping | None  # alerts only: how their labels name a device
    driver: str  # the devices the rule covers (the guard's fleet): this driver's
    selectors: tuple[str, ...]  # CEL, all must hold (the fleet; also which devices a signal may touch)
    taint_key: str
    taint_value: str
    steps: tuple[Step, ...]
    clear_after: float = DEFAULT_CLEAR_AFTER
    guard: Guard = field(default_factory=Guard)
    guard_origin: Literal["policy", "default", "unlimited", "unused"] = "unused"  # "unused": no NoExecute step

    def guard_status(self) -> dict[str, Any] | None:
        """The guard in force as the policy's status shows it (None: the rule never reaches NoExecute)."""
        if self.guard_origin == "unused":
            return None
        return {"origin": self.guard_origin, **self.guard.fields()}


@dataclass(frozen=True, slots=True)
class Policy:
    name: str
    uid: str
    generation: int
    mode: Literal["Enforce", "DryRun"]
    rules: tuple[Rule, ...]

    @property
    def dry_run(self) -> bool:
        return self.mode == "DryRun"


def _obj(value: Any, path: str, *, required: bool = True) -> dict[str, Any]:
    if value is None and not required:
        return {}
    if not isinstance(value, dict):
        raise PolicyError(path, f"must be an object, got {type(value).__name__}")
    return value


def _str(value: Any, path: str, *, required: bool = False) -> str:
    if value is None or value == "":
        if required:
            raise PolicyError(path, "is required")
        return ""
    if not isinstance(value, str):
        raise PolicyError(path, f"must be a string, got {type(value).__name__}")
    return value


def _int(value: Any, path: str, *, minimum: int = 0) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise PolicyError(path, f"must be an integer >= {minimum}, got {value!r}")
    return value


def _percent(value: Any, path: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 100:
        raise PolicyError(path, f"must be a number from 0 to 100, got {value!r}")
    return float(value)


def _labels(value: Any, path: str) -> dict[str, str]:
    out = {}
    for k, v in _obj(value, path, required=False).items():
        out[k] = _str(v, f"{path}.{k}", required=True)
    return out


def _steps(value: Any, path: str) -> tuple[Step, ...]:
    if not isinstance(value, list) or not value:
        raise PolicyError(path, "must be a non-empty list of steps")
    steps: list[Step] = []
    for i, raw in enumerate(value):
        p = f"{path}[{i}]"
        s = _obj(raw, p)
        effect = _str(s.get("effect"), f"{p}.effect", required=True)
        if effect not in EFFECTS:
            raise PolicyError(f"{p}.effect", f"must be one of {', '.join(EFFECTS)}, got {effect!r}")
        after = parse_duration(s["after"], f"{p}.after") if s.get("after") is not None else None
        occurrences = _int(s.get("occurrences"), f"{p}.occurrences", minimum=1)
        within = parse_duration(s["within"], f"{p}.within") if s.get("within") is not None else 3600.0
        if i > 0 and after is None and occurrences is None:
            raise PolicyError(p, "a later step needs `after` or `occurrences`")
        if steps and RANK[effect] <= RANK[steps[-1].effect]:
            raise PolicyError(f"{p}.effect", f"must be stronger than the step before ({steps[-1].effect})")
        steps.append(Step(effect, after if after is not None else (0.0 if i == 0 and occurrences is None else None), occurrences, within))
    return tuple(steps)


def _guard(value: Any, path: str) -> Guard:
    g = _obj(value, path, required=False)
    return Guard(
        max_no_execute=_int(g.get("maxNoExecute"), f"{path}.maxNoExecute"),
        max_no_execute_percent=_percent(g.get("maxNoExecutePercent"), f"{path}.maxNoExecutePercent"),
        max_per_node=_int(g.get("maxNoExecutePerNode"), f"{path}.maxNoExecutePerNode"),
        max_per_node_percent=_percent(g.get("maxNoExecutePerNodePercent"), f"{path}.maxNoExecutePerNodePercent"),
        max_new_per_minute=_int(g.get("maxNewNoExecutePerMinute"), f"{path}.maxNewNoExecutePerMinute"),
    )


def _mapping(value: Any, path: str) -> DeviceMapping:
    d = _obj(value, path, required=False)
    known = {"driver", "driverLabel", "nodeLabel", "poolLabel", "deviceLabel", "attribute", "attributeLabel"}
    for k in d:
        if k not in known:
            raise PolicyError(f"{path}.{k}", "unknown field")
    m = DeviceMapping(**{_snake(k): _str(v, f"{path}.{k}") for k, v in d.items()})
    if bool(m.attribute) != bool(m.attribute_label):
        raise PolicyError(f"{path}.attribute", "attribute and attributeLabel go together")
    if not (m.device_label or m.attribute):
        raise PolicyError(path, "names no device: set deviceLabel, or attribute with attributeLabel")
    if not (m.node_label or m.pool_label or m.attribute):
        raise PolicyError(path, "names neither node nor pool: set nodeLabel or poolLabel (or match by attribute)")
    return m


def _snake(name: str) -> str:
    return re.sub(r"([A-Z])", lambda c: "_" + c.group(1).lower(), name)


def _rule(raw: Any, path: str) -> Rule:
    r = _obj(raw, path)
    name = _str(r.get("name"), f"{path}.name", required=True)
    signal = _obj(r.get("signal"), f"{path}.signal")
    kinds = [k for k in ("alert", "driverTaint", "nodeCondition") if k in signal]
    if len(kinds) != 1:
        raise PolicyError(f"{path}.signal", "must name exactly one of alert, driverTaint, nodeCondition")
    kind = kinds[0]
    alert = taint_signal = condition = None
    if kind == "alert":
        a = _obj(signal["alert"], f"{path}.signal.alert")
        labels = _labels(a.get("matchLabels"), f"{path}.signal.alert.matchLabels")
        if not labels:
            raise PolicyError(f"{path}.signal.alert.matchLabels", "is required (an empty match would take every alert)")
        alert = AlertSignal(labels)
    elif kind == "nodeCondition":
        c = _obj(signal["nodeCondition"], f"{path}.signal.nodeCondition")
        condition = ConditionSignal(
            _str(c.get("type"), f"{path}.signal.nodeCondition.type", required=True),
            _str(c.get("status"), f"{path}.signal.nodeCondition.status") or "True",
        )
    else:
        t = _obj(signal["driverTaint"], f"{path}.signal.driverTaint")
        values = t.get("values") or []
        if not isinstance(values, list):
            raise PolicyError(f"{path}.signal.driverTaint.values", "must be a list of strings")
        taint_signal = TaintSignal(
            _str(t.get("key"), f"{path}.signal.driverTaint.key", required=True),
            tuple(_str(v, f"{path}.signal.driverTaint.values[{i}]", required=True) for i, v in enumerate(values)),
            _str(t.get("effect"), f"{path}.signal.driverTaint.effect") or None,
        )
    devices = _obj(r.get("devices"), f"{path}.devices")
    driver = _str(devices.get("driver"), f"{path}.devices.driver", required=True)
    selectors = devices.get("selectors") or []
    if not isinstance(selectors, list):
        raise PolicyError(f"{path}.devices.selectors", "must be a list")
    cel = tuple(
        _str(
            _obj(_obj(s, f"{path}.devices.selectors[{i}]").get("cel"), f"{path}.devices.selectors[{i}].cel").get("expression"),
            f"{path}.devices.selectors[{i}].cel.expression",
            required=True,
        )
        for i, s in enumerate(selectors)
    )
    mapping = None
    if kind == "alert":
        mapping = _mapping(r.get("match"), f"{path}.match")
        if not (mapping.driver or mapping.driver_label):
            mapping = dataclasses.replace(mapping, driver=driver)
    taint = _obj(r.get("taint"), f"{path}.taint")
    clear_after = parse_duration(r["clearAfter"], f"{path}.clearAfter") if r.get("clearAfter") is not None else DEFAULT_CLEAR_AFTER
    steps = _steps(r.get("steps"), f"{path}.steps")
    guard = _guard(r.get("guard"), f"{path}.guard")
    origin: Literal["policy", "default", "unlimited", "unused"] = "unused"
    if any(s.effect == "NoExecute" for s in steps):
        if r.get("guard") is None:
            guard, origin = DEFAULT_GUARD, "default"
        else:
            origin = "unlimited" if guard.unlimited else "policy"
    return Rule(
        name=name,
        kind=kind,
        alert=alert,
        taint_signal=taint_signal,
        condition=condition,
        device=mapping,
        driver=driver,
        selectors=cel,
        taint_key=_str(taint.get("key"), f"{path}.taint.key", required=True),
        taint_value=_str(taint.get("value"), f"{path}.taint.value"),
        steps=steps,
        clear_after=clear_after,
        guard=guard,
        guard_origin=origin,
    )


def parse_policy(obj: Mapping[str, Any]) -> Policy:
    """The policy object as the API serves it; PolicyError names the first faulty field."""
    meta = _obj(obj.get("metadata"), "metadata")
    spec = _obj(obj.get("spec"), "spec")
    mode = spec.get("mode", "Enforce")
    if mode not in ("Enforce", "DryRun"):
        raise PolicyError("spec.mode", f"must be Enforce or DryRun, got {mode!r}")
    raw_rules = spec.get("rules")
    if not isinstance(raw_rules, list) or not raw_rules:
        raise PolicyError("spec.rules", "must be a non-empty list")
    rules = tuple(_rule(r, f"spec.rules[{i}]") for i, r in enumerate(raw_rules))
    names = [r.name for r in rules]
    for i, n in enumerate(names):
        if n in names[:i]:
            raise PolicyError(f"spec.rules[{i}].name", f"duplicate rule name {n!r}")
    return Policy(
        name=_str(meta.get("name"), "metadata.name", required=True),
        uid=_str(meta.get("uid"), "metadata.uid"),
        generation=int(meta.get("generation") or 0),
        mode=mode,
        rules=rules,
    )
