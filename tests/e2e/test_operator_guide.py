"""docs/operator-guide.md's maintenance walkthrough, run command by command against the fake API server."""

from __future__ import annotations

import re
import shlex

from tests.e2e.cluster import (
    CRD_GROUP,
    FakeApi,
    cluster_extender,
    wait_converged,
    wait_for,
)
from tests.e2e.harness import DEMO, ROOT, demo_pod_args
from tests.e2e.test_cluster_mode import reasons
from tests.e2e.test_kubectl_dra import dra

GUIDE = ROOT / "docs" / "operator-guide.md"
ALL = ["node-a", "node-b", "node-c"]


def walkthrough() -> list[list[str]]:
    block = re.search(r"<!-- walkthrough -->\n```sh\n(.*?)```\n<!-- /walkthrough -->", GUIDE.read_text(), re.DOTALL)
    assert block, "the walkthrough block is missing from docs/operator-guide.md"
    commands = [shlex.split(line) for line in block.group(1).splitlines() if line.strip() and not line.startswith("#")]
    assert all(c[:2] == ["kubectl", "dra"] for c in commands), commands
    return [c[2:] for c in commands]


def test_the_guides_walkthrough() -> None:
    steps = walkthrough()
    assert [s[0] for s in steps] == ["taint", "explain-rule", "taint", "devices", "why", "taint", "untaint"]
    api = FakeApi(DEMO)
    ext = cluster_extender(api, "--placement-wait", "0", command="all")
    try:
        ext.wait_ready()
        wait_converged(api, ext)
        before = reasons(ext, demo_pod_args("trainer", ALL))
        assert before["node-a"] is None, before
        rule = "node-a-maintenance"

        def status_message() -> str | None:
            obj = api.get("DeviceTaintRule", None, rule, group=CRD_GROUP) or {}
            conditions = (obj.get("status") or {}).get("conditions") or ()
            return next((c["message"] for c in conditions if c.get("reason") == "NoEffect"), None)

        # 1. effect None, then explain: the controller's dry run, word for word.
        assert "created" in dra(api, *steps[0]).stdout
        message = wait_for(status_message, timeout=20, what="the controller's dry run")
        assert message in dra(api, *steps[1]).stdout
        # 2. NoSchedule: /filter rejects node-a; devices shows the taint; why says what /filter says.
        assert "configured" in dra(api, *steps[2]).stdout
        wait_converged(api, ext)
        rejected = reasons(ext, demo_pod_args("trainer", ALL))
        assert rejected["node-a"] is not None and "example.com/maintenance=planned:NoSchedule" in rejected["node-a"], rejected
        devices = dra(api, *steps[3]).stdout
        assert "example.com/maintenance=planned:NoSchedule" in devices and f"rule/{rule}" in devices
        why = dra(api, *steps[4]).stdout
        assert rejected["node-a"] in why
        # 3. NoExecute.
        assert "configured" in dra(api, *steps[5]).stdout
        obj = api.get("DeviceTaintRule", None, rule, group=CRD_GROUP)
        assert obj is not None and obj["spec"]["taint"]["effect"] == "NoExecute"
        # 4. untaint: node-a fits again.
        assert "deleted" in dra(api, *steps[6]).stdout
        wait_converged(api, ext)
        assert reasons(ext, demo_pod_args("trainer", ALL)) == before
    finally:
        ext.stop()
        api.stop()
