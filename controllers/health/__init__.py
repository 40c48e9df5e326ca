"""Device health → taints, by policy (KEP-5055's external health monitoring, docs/health.md).

A `DeviceHealthPolicy` says which signals (Alertmanager alerts, driver
taints) mark which devices, the ladder of taint effects they climb, the guard
that keeps a mass failure from evicting the fleet, and when a device is
cleared. The parts:

- policy.py: the CRD parsed once into frozen values (errors name the field);
- alerts.py: Alertmanager's and Grafana's webhook payloads, validated;
- resolver.py: an alert's labels → the device, against the tracker's views;
- ladder.py: the pure, clock-injected state machine (ladder, hold-down, guard);
- rules.py: a device's state ↔ its DeviceTaintRule (name, labels, annotation);
- controller.py: the leader's loop and the rules' API writes;
- status.py: what a policy shows (its status subresource, Events);
- sinks.py: the controller's own reflector sinks (policies, nodes);
- receiver.py: the webhook listener (bearer token, body limits).
"""

from __future__ import annotations
