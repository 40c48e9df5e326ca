"""Whether a pod fit when the extender rejected it: free devices counted from the informers, to tell a wrong rejection."""

from __future__ import annotations

from collections import Counter
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
        rules = [r for k in ("DeviceTaintRule", "DeviceTaintRule.dra-extender") if k in self.inf for r in self.inf[k].cache.values()]
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
                if any(self._selects(r, driver, pool, d.get("name")) for r in rules):
                    continue
                out.add((driver, pool, d.get("name")))
        return out

    @staticmethod
    def _selects(rule: dict[str, Any], driver: str, pool: str, device: str) -> bool:
        spec = rule.get("spec") or {}
        if (spec.get("taint") or {}).get("effect") not in ("NoSchedule", "NoExecute"):
            return False
        sel = spec.get("deviceSelector")
        if sel is None:
            return False
        return all(sel.get(k) in (None, v) for k, v in (("driver", driver), ("pool", pool), ("device", device)))

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
