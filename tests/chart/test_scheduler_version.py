"""The chart runs a kube-scheduler of the cluster's minor (issue 41 row 12).

Upstream supports no skew of kube-scheduler against its API server's minor:
the chart takes the tag from `scheduler.image.tagByMinor` at the minor Helm
reads from the cluster (`.Capabilities.KubeVersion`, here Helm's own render
at a given kube version, as `helm template --kube-version`), unless
`scheduler.image.tag` pins one; a minor without an entry fails the install
with what to set. The KubeSchedulerConfiguration's apiVersion is one that
minor's kube-scheduler accepts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
import yaml

from tests.chart.render import CHART, HELM_DEFAULT_KUBE_VERSION, objects, one, render

# kubescheduler.config.k8s.io versions each minor's kube-scheduler reads (v1 since 1.25; v1beta3 removed in 1.29).
CONFIG_VERSIONS = {"1.34": {"kubescheduler.config.k8s.io/v1"}, "1.35": {"kubescheduler.config.k8s.io/v1"},
                   "1.36": {"kubescheduler.config.k8s.io/v1"}}  # fmt: skip


@dataclass(frozen=True)
class Row:
    name: str
    kube_version: str | None  # None: Helm's default (helm template without --kube-version)
    image: str  # the kube-scheduler image, or "" when the render fails
    values: dict[str, Any] = field(default_factory=dict)
    error: str = ""


ROWS = [
    Row("1.34 cluster", "v1.34.2", "registry.k8s.io/kube-scheduler:v1.34.2"),
    Row("1.35 cluster", "v1.35.2", "registry.k8s.io/kube-scheduler:v1.35.2"),
    Row("1.36 cluster", "v1.36.2", "registry.k8s.io/kube-scheduler:v1.36.2"),
    Row("another 1.35 patch: the pinned patch of its minor", "v1.35.0", "registry.k8s.io/kube-scheduler:v1.35.2"),
    Row("a distribution's 1.34 (v1.34.1-eks-…)", "v1.34.1-eks-113cf36", "registry.k8s.io/kube-scheduler:v1.34.2"),
    Row("helm template without --kube-version: Helm's own minor", None,
        f"registry.k8s.io/kube-scheduler:v1.{HELM_DEFAULT_KUBE_VERSION.split('.')[1]}.2"),
    Row("scheduler.image.tag pins one: it wins", "v1.35.2", "registry.k8s.io/kube-scheduler:v1.35.1",
        {"scheduler": {"image": {"tag": "v1.35.1"}}}),
    Row("an own tagByMinor entry (a mirror's patch)", "v1.34.2", "mirror.example.com/kube-scheduler:v1.34.3",
        {"scheduler": {"image": {"repository": "mirror.example.com/kube-scheduler", "tagByMinor": {"1.34": "v1.34.3"}}}}),
    Row("1.37: not yet tested, the install says what to set", "v1.37.0", "",
        error="scheduler.image.tagByMinor has no kube-scheduler for Kubernetes 1.37 (the cluster reports v1.37.0), and "
        "scheduler.image.tag is not set"),
    Row("1.33: unsupported, refused", "v1.33.4", "", error="dra-extender supports 1.34 to 1.36"),
]  # fmt: skip


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_the_scheduler_is_the_clusters_minor(row: Row) -> None:
    if row.error:
        with pytest.raises(Exception) as e:
            objects(row.values, kube_version=row.kube_version)
        assert row.error in str(e.value), e.value
        assert "scheduler.image.tag=v1." in str(e.value), e.value
        return
    objs = objects(row.values, kube_version=row.kube_version)
    deployment = one(objs, "Deployment", "dra-extender")
    scheduler = next(c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "kube-scheduler")
    assert scheduler["image"] == row.image
    notes = next(t for p, t in render(row.values, kube_version=row.kube_version).items() if p.endswith("NOTES.txt"))
    assert f"kube-scheduler {row.image.rpartition(':')[2]} with the profile" in notes
    minor = ".".join(row.image.rpartition(":v")[2].split(".")[:2])
    config = yaml.safe_load(one(objs, "ConfigMap", "-config")["data"]["config.yaml"])
    assert config["apiVersion"] in CONFIG_VERSIONS[minor], (minor, config["apiVersion"])


def test_every_supported_minor_has_a_scheduler() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert set(values["scheduler"]["image"]["tagByMinor"]) == set(CONFIG_VERSIONS)
    assert values["scheduler"]["image"]["tag"] == "", "a pinned default would run one minor's scheduler everywhere"
