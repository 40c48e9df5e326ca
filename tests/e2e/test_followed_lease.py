"""The sidecar follows the Lease its scheduler's configuration names, and says loudly when nobody renews it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tests.e2e.cluster import FakeApi, cluster_extender, wait_for
from tests.e2e.harness import DEMO
from tracker.timestamps import rfc3339


def _stale_lease(namespace: str, name: str, renewed_ago: float) -> dict:
    renewed = rfc3339(datetime.now(UTC) - timedelta(seconds=renewed_ago), micro=True)
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"holderIdentity": "gone_1", "leaseDurationSeconds": 15, "renewTime": renewed},
    }


def test_a_lease_nobody_renews_shows_in_log_metric_and_readyz(tmp_path) -> None:
    config = tmp_path / "scheduler.yaml"
    config.write_text(
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
        "leaderElection: {leaderElect: true, resourceNamespace: dra-system, resourceName: dra-scheduler}\n"
        "profiles:\n- schedulerName: dra-scheduler\n  plugins: {multiPoint: {disabled: [{name: DynamicResources}]}}\n"
    )
    api = FakeApi(DEMO)
    try:
        api.create(_stale_lease("dra-system", "dra-scheduler", renewed_ago=120))
    except Exception:
        api.stop()
        raise
    ext = cluster_extender(api, "--scheduler-config", str(config), env={"HOSTNAME": "sched-a"})
    try:
        ext.wait_ready()
        body = wait_for(lambda: (r := ext.http.get("/readyz")).status_code == 200 and "warning:" in r.text and r.text, what="the warning")
        assert body.startswith("ok\nwarning: Lease dra-system/dra-scheduler not renewed for 1"), body
        assert "dra_extender_followed_lease_stale 1.0" in ext.http.get("/metrics").text
        assert ext.logs().count("followed lease is not renewed by anyone") == 1
        assert ext.post("bind", b'{"PodName": "trainer", "PodNamespace": "default", "PodUID": "x", "Node": "node-a"}').json() == {
            "Error": "not leader"
        }
        # Someone renews it: the warning goes away.
        lease = api.get("Lease", "dra-system", "dra-scheduler")
        assert lease is not None
        lease["spec"]["renewTime"] = rfc3339(micro=True)
        api.replace(lease)
        wait_for(lambda: ext.http.get("/readyz").text == "ok", what="the warning to clear")
        assert "dra_extender_followed_lease_stale 0.0" in ext.http.get("/metrics").text
    finally:
        ext.stop()
        api.stop()
