"""The controllers: device-taint eviction, device health (alerts to taints) and the foreign-pod check.

They run off the scheduler's latency path, in their own process (`dra-extender controllers`),
with their own Lease, probes and metrics; they read the tracker's state and write through it.
"""
