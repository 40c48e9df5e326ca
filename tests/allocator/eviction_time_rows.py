"""The one table of the tolerationSeconds rule (`allocator.tolerations.eviction_time`), run by the pure
test, by the device eviction plan (NoExecute) and by the volume eviction plan (NoUse).

Upstream's device-taint eviction controller (`claimEvictionTime`): not tolerated, at once; a matching
toleration without seconds, never (even beside one with seconds: unlike the node taint manager's
`getMinTolerationTime`, where the smallest seconds win); otherwise timeAdded + the smallest matching
seconds, 0 or less counting as 0. Every row is valid for both paths (the volume annotation allows
`tolerationSeconds` only with `effect: NoUse`); rows one path alone has stay with its own test.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from allocator.types import DeviceToleration

KEY = "example.com/broken"
VALUE = "yes"  # the taint's value
EVICTING = "<evicting>"  # NoExecute for a device, NoUse for a volume
OTHER = "<other>"  # NoSchedule for a device, NoAttachOrMount for a volume: does not match the evicting taint


@dataclass(frozen=True, slots=True)
class Tol:
    """A toleration with its effect named by role."""

    key: str = KEY
    operator: str = "Exists"
    value: str = ""
    effect: str = EVICTING
    seconds: int | None = None

    def api(self, evicting: str, other: str) -> dict[str, Any]:
        """As the API (or the volume annotation) writes it; an empty operator is left out, for the parser's default."""
        out = self.parsed(evicting, other).to_api()
        if not self.operator:
            del out["operator"]
        return out

    def parsed(self, evicting: str, other: str) -> DeviceToleration:
        effect = {EVICTING: evicting, OTHER: other}.get(self.effect, self.effect)
        return DeviceToleration(self.key, self.operator or "Equal", self.value, effect, self.seconds)


When = int | Literal["now", "never"]  # seconds after timeAdded, at once, or never


@dataclass(frozen=True, slots=True)
class Row:
    name: str
    tolerations: tuple[Tol, ...]
    want: When


ROWS = [
    Row("no toleration: now", (), "now"),
    Row("a toleration of another key: now", (Tol(key="example.com/other"),), "now"),
    Row("a toleration of another effect: now", (Tol(effect=OTHER),), "now"),
    Row("Equal with another value: now", (Tol(operator="Equal", value="no"),), "now"),
    Row("Equal with the taint's value, no seconds: never", (Tol(operator="Equal", value=VALUE),), "never"),
    Row("an empty operator means Equal", (Tol(operator="", value=VALUE, seconds=15),), 15),
    Row("tolerationSeconds absent: never", (Tol(),), "never"),
    Row("tolerationSeconds counts from timeAdded", (Tol(seconds=60),), 60),
    Row("tolerationSeconds 0: at timeAdded", (Tol(seconds=0),), 0),
    Row("negative tolerationSeconds counts as 0", (Tol(seconds=-5),), 0),
    Row("several matching: the smallest seconds win", (Tol(seconds=300), Tol(seconds=30), Tol(seconds=120)), 30),
    Row("several matching: one without seconds tolerates for good", (Tol(seconds=30), Tol()), "never"),
    Row("several matching: one without seconds wins over 0 too", (Tol(seconds=0), Tol(key="")), "never"),
    Row("only matching tolerations' seconds count", (Tol(key="example.com/other", seconds=5), Tol(seconds=60)), 60),
    Row("a toleration of another key without seconds spares nothing", (Tol(key="example.com/other"), Tol(seconds=60)), 60),
    Row("Exists with an empty key tolerates every key: never", (Tol(key=""),), "never"),
    Row("Exists with an empty key and seconds", (Tol(key="", seconds=20),), 20),
    Row("an empty effect matches the evicting effect: never", (Tol(effect=""),), "never"),
    Row("an empty key and effect tolerate everything", (Tol(key="", effect=""),), "never"),
]
IDS = [r.name for r in ROWS]


def due(want: When, added: float) -> float | None:
    """The plan's time for a row: 0.0 (at once), timeAdded + seconds, or None (the pod is not in the plan)."""
    if want == "now":
        return 0.0
    if want == "never":
        return None
    return added + want
