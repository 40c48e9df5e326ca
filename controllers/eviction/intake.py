"""The eviction controller's intake: tracker events in, typed views and a dirty plan out.

Every tracker event that can change who must leave marks the plan dirty and
wakes the loop, except a pod event that is this controller's own write
coming back (its condition, its deletion): that changes no plan, so it must
not restart the wait. DeviceTaintRules are parsed here, once, into the
views the rest of the controller reads; pods come parsed from the tracker
(`ClusterState.pod_statuses`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping

from controllers.eviction.rule_view import RuleView
from tracker import events as ev
from tracker.pod_status import PodStatus
from tracker.state import ClusterState

_TRIGGERS = frozenset(
    {ev.POD, ev.RESOURCE_CLAIM, ev.RESOURCE_SLICE, ev.DEVICE_TAINT_RULE, ev.RESOURCE_SLICE_PATCH, ev.DEVICE_CLASS}
    | {ev.PERSISTENT_VOLUME_CLAIM, ev.PERSISTENT_VOLUME}
)


class Intake:
    def __init__(
        self,
        state: ClusterState,
        *,
        own_write: Callable[[str], bool],
        on_rule: Callable[[RuleView], None],
        on_rule_gone: Callable[[RuleView], None],
    ) -> None:
        """`own_write(uid)`: a pod this controller is evicting or has evicted; `on_rule`: a rule added or
        changed; `on_rule_gone`: a rule deleted (its last view)."""
        self.state = state
        self.own_write = own_write
        self.on_rule = on_rule
        self.on_rule_gone = on_rule_gone
        self.dirty = True
        self.wake = asyncio.Event()
        # The pods the tracker holds (a live view) and every DeviceTaintRule (by (group, name)), in arrival order.
        self.pods: Mapping[str, PodStatus] = state.pod_statuses
        self.rules: dict[tuple[str, str], RuleView] = {}
        state.subscribe(self._on_event)

    def _on_event(self, event: ev.ObjectEvent) -> None:
        if event.kind not in _TRIGGERS:
            return
        if event.kind == ev.POD:
            uid = ev.object_uid(event.object)
            if uid and self.own_write(uid):
                return
        if event.kind == ev.DEVICE_TAINT_RULE:
            ident = (event.group or ev.GROUP_RESOURCE, event.key)
            if event.type == "DELETED":
                gone = self.rules.pop(ident, None)
                if gone is not None:
                    self.on_rule_gone(gone)
            else:
                rule = self.rules[ident] = RuleView.of(*ident, event.object)
                self.on_rule(rule)
        self.dirty = True
        self.wake.set()
