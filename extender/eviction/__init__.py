"""The NoExecute eviction controller (KEP-5055's eviction half); see docs/eviction.md."""

from __future__ import annotations

from extender.eviction.clock import Clock, SystemClock
from extender.eviction.controller import EvictionController, Settings
from extender.eviction.plan import Ownership

__all__ = ["Clock", "EvictionController", "Ownership", "Settings", "SystemClock"]
