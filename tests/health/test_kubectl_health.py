"""`kubectl dra health` over what the health controller wrote (the fake API server, in process)."""

from __future__ import annotations

import yaml

from kubectl_dra.cli import build_parser, run
from kubesim.objects import node
from tests.eviction.harness import seed
from tests.health.harness import HealthCluster, alert, delivery, policy, uuid_slice, xid_rule


async def dra(cluster: HealthCluster, *argv: str) -> tuple[int, str]:
    lines: list[str] = []
    args = build_parser().parse_args(["--kubeconfig", str(cluster.kubeconfig), *argv])
    code = await run(args, lines.append)
    return code, "\n".join(lines)


async def test_health_lists_the_devices_with_step_since_cause_and_clearing(cluster: HealthCluster) -> None:
    seed(cluster.api, node("node-a"), uuid_slice(4), policy("gpu-health", xid_rule(guard={"maxNoExecute": 4})))
    await cluster.start()
    assert (await dra(cluster, "health"))[1].splitlines()[0] == "No devices held by a DeviceHealthPolicy."
    await cluster.post(delivery(alert("GPU-node-a-1"), alert("GPU-node-a-2")))
    await cluster.advance(301)
    await cluster.post(delivery(alert("GPU-node-a-2", status="resolved")))
    code, text = await dra(cluster, "health")
    assert code == 0
    lines = text.splitlines()
    assert lines[0].split() == ["DEVICE", "NODE", "POLICY", "RULE", "STEP", "SINCE", "CAUSE", "CLEARS"]
    assert lines[1].split() == [
        "gpu.example.com/node-a/gpu-1", "node-a", "gpu-health", "xid-79", "NoExecute", "2026-01-01T00:00:00Z", "GPUXid", "xid=79", "while", "firing",
    ]  # fmt: skip
    assert lines[2].split()[-1] == "2026-01-01T00:20:01Z"  # resolved at 5:01, held 15 minutes
    assert lines[4].split() == ["POLICY", "MODE", "RULE", "GUARD", "UNMATCHED"]
    assert lines[5].split() == ["gpu-health", "Enforce", "xid-79", "policy:", "at", "most", "4", "at", "NoExecute", "0"]
    code, text = await dra(cluster, "health", "--policy", "gpu-health", "-o", "yaml")
    doc = yaml.safe_load(text)
    assert doc["policy"]["metadata"]["name"] == "gpu-health"
    assert [d["device"] for d in doc["devices"]] == ["gpu.example.com/node-a/gpu-1", "gpu.example.com/node-a/gpu-2"]
    assert doc["policy"]["status"]["rules"][0]["devices"]["NoExecute"] == 2


async def test_an_unknown_policy_is_a_usage_error(cluster: HealthCluster) -> None:
    seed(cluster.api, node("node-a"), uuid_slice(1))
    await cluster.start()
    from kubectl_dra.cli import UsageError

    try:
        await dra(cluster, "health", "--policy", "nope")
    except UsageError as e:
        assert str(e) == "DeviceHealthPolicy 'nope' not found"
    else:
        raise AssertionError("no usage error")
