"""`kubectl dra taint --upstream` on a server without resource.k8s.io DeviceTaintRule says what this server needs (issue 41 row 11).

The plugin asks the server itself (/version, and which resource.k8s.io
versions it serves) and names the kube-apiserver flags for that minor: on
1.33-1.35 the alpha version v1alpha3 (off by default) with DRADeviceTaints,
plus DRADeviceTaintRules from 1.35; on 1.36 the beta version v1beta2 (off by
default) with DRADeviceTaintRules. Not "Error from server". Against the fake
API server at each version, through the plugin's entry point.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

import pytest

from kubectl_dra.cli import main
from kubesim.fakeapi import FakeApiServer

GROUP = "resource.k8s.io"


@dataclass(frozen=True)
class Row:
    name: str
    version: str
    served: tuple[str, ...]
    says: str


ROWS = [
    Row("1.34: v1alpha3 and DRADeviceTaints (1.34 has no DRADeviceTaintRules)", "v1.34.2", ("v1", "v1beta1", "v1beta2"),
        "the API server (Kubernetes 1.34, serves resource.k8s.io v1, v1beta2, v1beta1) does not serve resource.k8s.io "
        "DeviceTaintRule: on 1.34 it is resource.k8s.io/v1alpha3, served with kube-apiserver "
        "--runtime-config=resource.k8s.io/v1alpha3=true and --feature-gates=DRADeviceTaints=true"),
    Row("1.35: v1alpha3 and both gates", "v1.35.2", ("v1", "v1beta1", "v1beta2"),
        "on 1.35 it is resource.k8s.io/v1alpha3, served with kube-apiserver --runtime-config=resource.k8s.io/v1alpha3=true "
        "and --feature-gates=DRADeviceTaints=true,DRADeviceTaintRules=true"),
    Row("1.35 serving v1alpha3 already: the gates only", "v1.35.2", ("v1", "v1alpha3"),
        "on 1.35 it is resource.k8s.io/v1alpha3, served with kube-apiserver --feature-gates=DRADeviceTaints=true,DRADeviceTaintRules=true"),
    Row("1.36: v1beta2 (off by default there) and DRADeviceTaintRules", "v1.36.2", ("v1",),
        "(Kubernetes 1.36, serves resource.k8s.io v1) does not serve resource.k8s.io DeviceTaintRule: on 1.36 it is "
        "resource.k8s.io/v1beta2, served with kube-apiserver --runtime-config=resource.k8s.io/v1beta2=true and "
        "--feature-gates=DRADeviceTaintRules=true"),
    Row("1.32: none yet", "v1.32.5", ("v1beta1",), "does not serve resource.k8s.io DeviceTaintRule: Kubernetes has it from 1.33 on"),
    Row("a minor this plugin does not know", "v1.38.0", ("v1",), "its release notes say which resource.k8s.io version and feature gates serve it"),
]  # fmt: skip


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
async def test_upstream_taint_names_what_this_server_needs(tmp_path: Path, capsys: pytest.CaptureFixture[str], row: Row) -> None:
    async with FakeApiServer(kubernetes_version=row.version, resource_versions=row.served, device_taint_rule_versions=()) as api:
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
        argv = ["--kubeconfig", str(kubeconfig), "taint", "example.com/x:NoSchedule", "--upstream", "--driver", "gpu.example.com"]
        code = await asyncio.to_thread(main, argv)
    _, err = capsys.readouterr()
    assert code == 1
    assert err.startswith("error: ") and "Error from server" not in err, err
    assert row.says in err, err
    assert err.rstrip().endswith("; or drop --upstream to use the project's CRD"), err
