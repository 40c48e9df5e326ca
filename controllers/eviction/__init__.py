"""The NoExecute eviction controller (KEP-5055's eviction half); see docs/eviction.md."""

from __future__ import annotations

from controllers.eviction.controller import EvictionController, Settings
from controllers.eviction.plan import Ownership
from tracker.clock import Clock, SystemClock

__all__ = ["Clock", "EvictionController", "Ownership", "Settings", "SystemClock"]
