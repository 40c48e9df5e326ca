"""Cluster objects the benchmarks and the kube-scheduler model seed: device classes and node-local slices."""

from __future__ import annotations

from typing import Any


def device_class(name: str, driver: str) -> dict[str, Any]:
    """A DeviceClass selecting every device of `driver`."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]},
    }


def node_slice(node: str, driver: str, devices: list[dict[str, Any]]) -> dict[str, Any]:
    """A node-local ResourceSlice: one pool per node, named after it, generation 1, one slice."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{driver}"},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


PARTITIONS_GI = (10, 10, 10, 10, 20, 20, 40)  # per GPU; first-fit takes the four 10Gi ones, then the counters are spent
GPU_GI = 40


def partitioned_slices(node: str, driver: str, gpus: int) -> list[dict[str, Any]]:
    """A node's pool of `gpus` partitionable GPUs: a device slice (7 partitions per GPU, each consuming
    its GPU's counters) and a counter-set slice (one 40Gi set per GPU), as drivers publish MIG-style layouts."""
    devices = []
    counter_sets = []
    for g in range(gpus):
        counter_sets.append({"name": f"gpu-{g}", "counters": {"memory": {"value": f"{GPU_GI}Gi"}}})
        for p, size in enumerate(PARTITIONS_GI):
            devices.append(
                {
                    "name": f"gpu-{g}-part-{p}",
                    "capacity": {"memory": {"value": f"{size}Gi"}},
                    "consumesCounters": [{"counterSet": f"gpu-{g}", "counters": {"memory": {"value": f"{size}Gi"}}}],
                }
            )
    dev_slice = node_slice(node, driver, devices)
    counters = node_slice(node, driver, [])
    counters["metadata"]["name"] = f"{node}-{driver}-counters"
    del counters["spec"]["devices"]
    counters["spec"]["sharedCounters"] = counter_sets
    for s in (dev_slice, counters):
        s["spec"]["pool"]["resourceSliceCount"] = 2
    return [dev_slice, counters]
