"""SIGTERM to a leading `dra-extender controllers`: the controllers stop and give up what they hold before the API session closes."""

from __future__ import annotations

from pathlib import Path

from controllers.health.leader_label import LABEL
from kubesim.objects import pod
from tests.e2e.cluster import FakeApi, cluster_extender, wait_for
from tests.e2e.harness import free_port

NAMESPACE = "dra-system"


def test_sigterm_while_leading_removes_the_leader_label_and_releases_the_lease(tmp_path: Path) -> None:
    api = FakeApi()
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    api.create({"kind": "Pod", **pod("ext-a", NAMESPACE, labels={"app": "dra-extender"})})
    ext = cluster_extender(
        api, "--leader-elect", "--alerts-listen", f"127.0.0.1:{free_port()}", "--alerts-token-file", str(token),
        env={"POD_NAME": "ext-a", "POD_NAMESPACE": NAMESPACE}, command="controllers",
    )  # fmt: skip
    try:
        ext.wait_ready()

        def labelled() -> bool:
            got = api.get("Pod", NAMESPACE, "ext-a")
            return bool(got and (got["metadata"].get("labels") or {}).get(LABEL) == "true")

        wait_for(labelled, timeout=30, what="the health leader label on the own pod")
        lease = api.get("Lease", NAMESPACE, "dra-extender-controllers")
        assert lease is not None and lease["spec"]["holderIdentity"], lease
        code = ext.stop()
        logs = ext.logs()
        assert code == 0, logs
        labels = api.get("Pod", NAMESPACE, "ext-a")["metadata"].get("labels") or {}  # type: ignore[index]
        assert LABEL not in labels and labels["app"] == "dra-extender", (labels, logs)
        spec = api.get("Lease", NAMESPACE, "dra-extender-controllers")["spec"]  # type: ignore[index]
        # client-go's release: no holder, a 1 s lease, so that the next candidate takes it at once.
        assert not spec.get("holderIdentity") and spec["leaseDurationSeconds"] == 1, (spec, logs)
        assert "Session is closed" not in logs, logs
        assert "health leader label removed" in logs and "released lease" in logs, logs
    finally:
        ext.stop()
        api.stop()
