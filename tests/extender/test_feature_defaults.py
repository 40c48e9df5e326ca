"""The DRA feature gates `serve` allocates with follow the minor the API server reports at /version.

Upstream's kube_features.go has DRAPartitionableDevices, DRAConsumableCapacity,
DRADeviceBindingConditions and DRAExtendedResource alpha and off in 1.34 and
1.35, beta and on from 1.36. The extender reads /version once at startup
through its client; a flag given wins; a /version that does not say is a
startup error naming what to pass, never 1.36's defaults guessed.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import pytest

from allocator.features import Features
from dra_extender.cli import build_parser
from dra_extender.process import UsageError
from dra_extender.serve import chosen_features
from kubesim.fakeapi import FakeApiServer
from tracker.apiserver.source import ApiSource

OFF = Features(partitionable_devices=False, consumable_capacity=False, binding_conditions=False, extended_resources=False)
ON = Features()


@dataclass(frozen=True)
class Row:
    name: str
    version: str  # the fake API server's gitVersion
    flags: tuple[str, ...]
    want: Features
    logged: str  # in the startup line's `gates`


ROWS = [
    Row("1.34: the four alpha gates off", "v1.34.2", (), OFF, "DRAPartitionableDevices=false,DRAConsumableCapacity=false"),
    Row("1.35: the four alpha gates off", "v1.35.2", (), OFF, "DRADeviceBindingConditions=false,DRAExtendedResource=false"),
    Row("1.36: the four beta gates on", "v1.36.2", (), ON, "DRAPartitionableDevices=true,DRAConsumableCapacity=true"),
    Row("1.37: still on", "v1.37.0", (), ON, "DRAExtendedResource=true"),
    Row("a distribution's minor (36+)", "v1.36.1-eks-4a2b", (), ON, "DRADeviceBindingConditions=true"),
    Row("1.35 with the gate on in the cluster: the flag wins", "v1.35.2", ("--feature-binding-conditions",),
        Features(partitionable_devices=False, consumable_capacity=False, binding_conditions=True, extended_resources=False),
        "DRAConsumableCapacity=false,DRADeviceBindingConditions=true"),
    Row("1.36 with a gate off in the cluster: the flag wins", "v1.36.2", ("--no-feature-consumable-capacity",),
        Features(consumable_capacity=False), "DRAConsumableCapacity=false"),
]  # fmt: skip


def _args(*flags: str) -> object:
    return build_parser().parse_args(["serve", "--standalone", *flags])


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
async def test_feature_gates_follow_the_servers_minor(tmp_path: Path, caplog: pytest.LogCaptureFixture, row: Row) -> None:
    caplog.set_level(logging.INFO, logger="dra_extender")
    async with FakeApiServer(kubernetes_version=row.version) as api:
        source = ApiSource(kubeconfig=str(api.write_kubeconfig(tmp_path / "kubeconfig")))
        try:
            got = await chosen_features(_args(*row.flags), source)  # type: ignore[arg-type]
        finally:
            await source.close()
        assert [r.path for r in api.requests if r.path == "/version"] == ["/version"]  # read once
    assert got == row.want
    line = [r for r in caplog.records if r.getMessage() == "DRA feature gates"]
    assert len(line) == 1 and row.logged in line[0].gates, [r.__dict__ for r in line]  # type: ignore[attr-defined]
    assert line[0].kubernetes == "1." + row.version.split(".")[1]  # type: ignore[attr-defined]


async def test_every_flag_given_needs_no_version(tmp_path: Path) -> None:
    flags = (
        "--feature-partitionable-devices",
        "--no-feature-consumable-capacity",
        "--feature-binding-conditions",
        "--no-feature-extended-resources",
    )
    async with FakeApiServer(kubernetes_version="v1.35.2") as api:
        source = ApiSource(kubeconfig=str(api.write_kubeconfig(tmp_path / "kubeconfig")))
        try:
            got = await chosen_features(_args(*flags), source)  # type: ignore[arg-type]
        finally:
            await source.close()
        assert not [r for r in api.requests if r.path == "/version"]
    assert got == Features(consumable_capacity=False, extended_resources=False)


async def test_a_version_that_does_not_say_is_a_startup_error(tmp_path: Path) -> None:
    async with FakeApiServer(kubernetes_version="v1.35.2") as api:
        api.set_faults(error_rate=1.0, error_status=503, paths=("version",))
        source = ApiSource(kubeconfig=str(api.write_kubeconfig(tmp_path / "kubeconfig")))
        try:
            with pytest.raises(UsageError) as e:
                await chosen_features(_args(), source)  # type: ignore[arg-type]
        finally:
            await source.close()
    assert str(e.value).startswith("GET /version: HTTP 503: the DRA feature gates' defaults depend on the cluster's minor"), e.value
    assert "--[no-]feature-binding-conditions" in str(e.value)
