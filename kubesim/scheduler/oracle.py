"""Whether a pod fit when the extender rejected it: free devices counted from the informers, to tell a wrong rejection."""

from __future__ import annotations

from collections import Counter
from itertools import product
from typing import Any

from kubesim.scheduler.api import Informer
from kubesim.scheduler.config import EXTENDED_RESOURCE


class FitOracle:
    """Whether a rejected pod would have fitted somewhere: free, untainted devices beyond those of pods in binding.

    The workloads request one device per pod claim and tolerate no taint; the
    oracle assumes exactly that (it is a yardstick, not an allocator).
    """

    def __init__(self, informers: dict[str, Informer]) -> None:
        self.inf = informers

    def devices(self) -> set[tuple[str, str, str]]:
        # Each rule's selector as a (driver, pool, device) pattern, None a wildcard: a device is looked up in the
        # set under its 8 patterns, so 1,000 health rules over 2,000 devices cost 16,000 lookups, not 2 million matches.
        selected = {
            pattern
            for k in ("DeviceTaintRule", "DeviceTaintRule.dra-extender")
            if k in self.inf
            for r in self.inf[k].cache.values()
            if (pattern := self._pattern(r)) is not None
        }
        out: set[tuple[str, str, str]] = set()
        for s in self.inf["ResourceSlice"].cache.values():
            spec = s.get("spec") or {}
            driver: Any = spec.get("driver")
            pool: Any = (spec.get("pool") or {}).get("name")
            for d in spec.get("devices") or []:
                if d.get("consumesCounters") or d.get("allowMultipleAllocations"):
                    continue  # not a whole device: the yardstick does not count partitions or shares
                if any(t.get("effect") in ("NoSchedule", "NoExecute") for t in d.get("taints") or []):
                    continue
                name = d.get("name")
                if selected and any(p in selected for p in product((driver, None), (pool, None), (name, None))):
                    continue
                out.add((driver, pool, name))
        return out

    @staticmethod
    def _pattern(rule: dict[str, Any]) -> tuple[Any, Any, Any] | None:
        """The (driver, pool, device) a NoSchedule or NoExecute rule selects, None in a place for any; None if it taints nothing here."""
        spec = rule.get("spec") or {}
        if (spec.get("taint") or {}).get("effect") not in ("NoSchedule", "NoExecute"):
            return None
        sel = spec.get("deviceSelector")
        if sel is None:
            return None
        return (sel.get("driver"), sel.get("pool"), sel.get("device"))

    def allocated(self) -> Counter[tuple[str, str, str]]:
        out: Counter[tuple[str, str, str]] = Counter()
        for c in self.inf["ResourceClaim"].cache.values():
            for r in (((c.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or []:
                out[(r.get("driver"), r.get("pool"), r.get("device"))] += 1
        return out

    def free(self, in_binding: int) -> int:
        devices = self.devices()
        taken = sum(1 for d in self.allocated() if d in devices)
        return len(devices) - taken - in_binding


def pod_devices(pod: dict[str, Any]) -> int:
    spec = pod.get("spec") or {}
    extended = sum(int(((c.get("resources") or {}).get("limits") or {}).get(EXTENDED_RESOURCE, 0)) for c in spec.get("containers") or [])
    return len(spec.get("resourceClaims") or []) + extended


def claim_allocated(claims: dict[str, dict[str, Any]], pod: dict[str, Any]) -> bool:
    ns = pod["metadata"]["namespace"]
    names = [s.get("resourceClaimName") for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []]
    names += [c["resourceClaimName"] for c in (pod.get("spec") or {}).get("resourceClaims") or [] if c.get("resourceClaimName")]
    names.append(
        ((pod.get("status") or {}).get("extendedResourceClaimStatus") or {}).get("resourceClaimName")
    )  # DRA-backed extended resources
    names = [n for n in names if n]
    return bool(names) and all(((claims.get(f"{ns}/{n}") or {}).get("status") or {}).get("allocation") for n in names if n)
