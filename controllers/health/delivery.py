"""One webhook delivery's alerts matched to devices, in slices the event loop turns between.

The controller applies what this collects: per (policy rule, device), the
signals the delivery fires and resolves, in order, so each device's state is
copied once per slice of its signals (ladder.apply), not once per alert. An
alert's device is resolved once per delivery for each set of naming labels
(a storm of 20,000 fingerprints on one device resolves it once), again after
a turn of the loop in which the tracker's state changed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from allocator.device_view import DeviceView
from allocator.types import DeviceID
from controllers.health.alerts import Alert
from controllers.health.policy import Policy, Rule
from controllers.health.resolver import Unresolved, device_key, resolve
from tracker.state import ClusterState

# Work between two turns of the event loop that answers the verbs (docs/health.md, Bounded state): a few milliseconds.
ALERTS_PER_SLICE = 200  # alerts of a delivery matched, or signals applied

Ident = tuple[str, str]  # (policy, rule)
Change = tuple[str, str | None]  # (signal key, cause): fires it; (signal key, None): resolves it


@dataclass(slots=True)
class Pending:
    """One device's signals in one delivery, in order."""

    policy: Policy
    rule: Rule
    key: str
    did: DeviceID
    node: str
    changes: list[Change]


class Matching:
    """A delivery's alerts grouped per (policy rule, device); `count` hears each outcome, `unmatched` each alert naming none."""

    def __init__(
        self,
        state: ClusterState,
        selected: Callable[[Rule, DeviceView], bool],
        unmatched: Callable[[Ident, str, Alert, str], str],
        count: Callable[[str, str], None],
    ) -> None:
        self.state, self.selected, self.unmatched, self.count = state, selected, unmatched, count
        self.pending: dict[tuple[Ident, str], Pending] = {}
        self._found: dict[tuple[Ident, tuple[str, ...]], DeviceView | tuple[str, str]] = {}  # naming labels -> device or (why not, outcome)
        self._generation = state.generation

    async def run(self, alerts: Sequence[Alert], policies: Sequence[Policy]) -> None:
        for i, alert in enumerate(alerts):
            if i and not i % ALERTS_PER_SLICE:
                await asyncio.sleep(0)  # /filter and the other verbs answer between slices
                if self.state.generation != self._generation:
                    self._found.clear()
                    self._generation = self.state.generation
            matched = False
            for policy in policies:
                for rule in policy.rules:
                    if rule.alert is not None and rule.alert.matches(alert.labels):
                        matched = True
                        self._match(policy, rule, alert)
            if not matched:
                self.count("", "no_rule")

    def _match(self, policy: Policy, rule: Rule, alert: Alert) -> None:
        ident = (policy.name, rule.name)
        m = rule.device
        assert m is not None and rule.alert is not None  # an alert rule
        labels = alert.labels
        naming = tuple(labels.get(k, "") for k in (m.driver_label, m.node_label, m.pool_label, m.device_label, m.attribute_label))
        device = self._found.get((ident, naming))
        if device is None:
            view = resolve(self.state, m, labels)
            if isinstance(view, Unresolved):
                device = (view.reason, "unmatched")
            elif not self.selected(rule, view):
                device = (f"device {view.id} is not among the rule's devices", "unselected")
            else:
                device = view
            self._found[(ident, naming)] = device
        if isinstance(device, tuple):
            self.count(policy.name, self.unmatched(ident, device[0], alert, device[1]))
            return
        key = device_key(device.id)
        p = self.pending.get((ident, key))
        if p is None:
            p = self.pending[(ident, key)] = Pending(policy, rule, key, device.id, device.node_name or "", [])
        if not alert.firing:
            p.changes.append((alert.key, None))
            return
        cause = labels.get("alertname", "alert") + "".join(
            f" {k}={v}" for k, v in sorted(rule.alert.match_labels.items()) if k != "alertname"
        )
        p.changes.append((alert.key, cause))

    def slices(self) -> Iterator[tuple[Pending, list[Change]]]:
        """Each device's changes, ALERTS_PER_SLICE at a time."""
        for p in self.pending.values():
            for start in range(0, len(p.changes), ALERTS_PER_SLICE):
                yield p, p.changes[start : start + ALERTS_PER_SLICE]
