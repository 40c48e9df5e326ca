"""ManifestSource (`--source DIR`): loading, defaults, errors, live reload, the write overlay, the CRDs."""

from __future__ import annotations

import asyncio
import logging
import re
import time
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from allocator.parse import parse_device_taint_rule, parse_pod, parse_resource_claim, parse_resource_slice, parse_resource_slice_patch
from kubesim import objects
from kubesim.fakeapi.crd import SchemaValidator, compile_rule
from tests.tiers import examples
from tracker import events as ev
from tracker.manifest.load import TRACKED
from tracker.manifest.source import ManifestSource
from tracker.source import Conflict, Invalid, NotFound

ROOT = Path(__file__).resolve().parents[2]
CRDS = ROOT / "charts" / "dra-extender" / "crds"
T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
T0S = "2026-03-01T12:00:00Z"
EXT = ev.GROUP_EXTENDER
RES = ev.GROUP_RESOURCE


# ----------------------------------------------------------------------------- helpers


class Clock:
    def __init__(self, now: datetime = T0) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


class RecordingSink:
    """An EventSink that keeps what it was told, and the resulting objects."""

    def __init__(self) -> None:
        self.replaced: dict[tuple[str, str], list[dict[str, Any]]] = {}
        self.synced: set[tuple[str, str]] = set()
        self.events: list[ev.ObjectEvent] = []
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}

    def apply(self, event: ev.ObjectEvent) -> None:
        self.events.append(event)
        ident = (event.kind, event.group, event.key)
        if event.type == "DELETED":
            self.objects.pop(ident, None)
        else:
            self.objects[ident] = event.object

    def replace(self, kind: str, group: str, objects: list[dict[str, Any]]) -> None:
        self.replaced[(kind, group)] = objects
        for ident in [i for i in self.objects if i[:2] == (kind, group)]:
            del self.objects[ident]
        for o in objects:
            self.objects[(kind, group, ev.object_key(kind, o))] = o

    def mark_synced(self, kind: str, group: str) -> None:
        self.synced.add((kind, group))

    def of(self, kind: str, group: str) -> dict[str, dict[str, Any]]:
        return {k: o for (kk, g, k), o in self.objects.items() if (kk, g) == (kind, group)}

    def typed(self, *types: str) -> list[tuple[str, str, str]]:
        return [(e.type, e.kind, e.key) for e in self.events if not types or e.type in types]


async def eventually(predicate, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("condition not reached in time")


def write(directory: Path, rel: str, text: str) -> Path:
    path = directory / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


async def start(directory: Path, *, watch: bool = False, clock: Clock | None = None) -> tuple[ManifestSource, RecordingSink, asyncio.Task]:
    source = ManifestSource(directory, clock=clock or Clock(), watch=watch, debounce_ms=20)
    sink = RecordingSink()
    task = asyncio.create_task(source.run(sink))
    await eventually(lambda: sink.synced >= set(TRACKED))
    return source, sink, task


@pytest.fixture
async def running(tmp_path: Path) -> AsyncIterator[Any]:
    """Start a source over tmp_path (after the test wrote its files); cancel it afterwards."""
    tasks: list[asyncio.Task] = []

    async def go(*, watch: bool = False, clock: Clock | None = None) -> tuple[ManifestSource, RecordingSink]:
        source, sink, task = await start(tmp_path, watch=watch, clock=clock)
        tasks.append(task)
        return source, sink

    yield go
    for task in tasks:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


def records(caplog: pytest.LogCaptureFixture, message: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "dra_extender.source" and message in r.getMessage()]


NODE = "apiVersion: v1\nkind: Node\nmetadata: {name: %s}\n"
CLASS = "apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata: {name: %s}\nspec: {}\n"
RULE = (
    "apiVersion: %s\nkind: DeviceTaintRule\nmetadata: {name: %s}\n"
    "spec:\n  deviceSelector: {driver: gpu.example.com}\n  taint: {key: example.com/%s, effect: %s}\n"
)
POD = "apiVersion: v1\nkind: Pod\nmetadata: {name: %s}\nspec: {containers: [{name: c, image: i}]}\n"
CLAIM = (
    "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {name: %s, namespace: ml}\n"
    "spec:\n  devices:\n    requests: [{name: gpu, exactly: {deviceClassName: gpu}}]\n"
)
ALLOCATED = {
    "allocation": {"devices": {"results": [{"request": "gpu", "driver": "gpu.example.com", "pool": "p", "device": "g0"}]}},
    "reservedFor": [{"resource": "pods", "name": "p1", "uid": "u1"}],
}


def slice_yaml(api_version: str, name: str = "s1", taint: str = "{key: example.com/hot, effect: NoSchedule}") -> str:
    device = f"{{name: g0, attributes: {{model: {{string: a100}}}}, capacity: {{memory: {{value: 40Gi}}}}, taints: [{taint}]}}"
    if api_version.endswith("v1beta1"):
        device = (
            f"{{name: g0, basic: {{attributes: {{model: {{string: a100}}}}, capacity: {{memory: {{value: 40Gi}}}}, taints: [{taint}]}}}}"
        )
    return (
        f"apiVersion: {api_version}\nkind: ResourceSlice\nmetadata: {{name: {name}}}\n"
        f"spec: {{driver: gpu.example.com, nodeName: n1, pool: {{name: p, generation: 1, resourceSliceCount: 1}}, devices: [{device}]}}\n"
    )


# ----------------------------------------------------------------------------- loading


async def test_loads_every_manifest_recursively_in_every_form(tmp_path: Path, running) -> None:
    write(tmp_path, "a/b/nodes.yaml", NODE % "n1" + "---\n" + NODE % "n2" + "---\n")  # multi-doc, trailing empty doc
    write(tmp_path, "c.yml", CLASS % "gpu")
    write(
        tmp_path,
        "d.json",
        orjson.dumps({"apiVersion": "v1", "kind": "List", "items": [yaml.safe_load(NODE % "n3"), yaml.safe_load(POD % "p1")]}).decode(),
    )
    # kubectl's typed lists: items may omit kind/apiVersion.
    write(tmp_path, "e/nodelist.yaml", "apiVersion: v1\nkind: NodeList\nitems:\n- metadata: {name: n4}\n")
    write(tmp_path, "notes.txt", NODE % "ignored-txt")
    write(tmp_path, ".hidden/n.yaml", NODE % "ignored-hidden")
    source, sink = await running()
    assert set(sink.of(ev.NODE, "")) == {"n1", "n2", "n3", "n4"}
    assert set(sink.of(ev.DEVICE_CLASS, RES)) == {"gpu"}
    assert set(sink.of(ev.POD, "")) == {"default/p1"}
    # Every tracked kind is replaced (empty lists too, so deletions reconcile) and synced.
    assert set(sink.replaced) == set(TRACKED) and sink.synced == set(TRACKED)
    assert sink.replaced[(ev.RESOURCE_SLICE, RES)] == []
    report = source.load_report
    assert report.files == 4 and report.errors == ()
    assert report.objects == {"Node": 4, "DeviceClass": 1, "Pod": 1}


@pytest.mark.parametrize("api_version", ["resource.k8s.io/v1", "resource.k8s.io/v1beta2", "resource.k8s.io/v1beta1"])
async def test_slice_versions_load_and_parse(tmp_path: Path, running, api_version: str) -> None:
    write(tmp_path, "slice.yaml", slice_yaml(api_version))
    _, sink = await running()
    raw = sink.of(ev.RESOURCE_SLICE, RES)["s1"]
    parsed = parse_resource_slice(raw)
    (device,) = parsed.devices
    assert device.attributes["gpu.example.com/model"] == "a100"
    assert device.taints[0].key == "example.com/hot" and device.taints[0].time_added == T0S


async def test_rules_of_both_groups_are_different_objects_and_patches_of_both_spellings_load(tmp_path: Path, running) -> None:
    write(tmp_path, "upstream.yaml", RULE % ("resource.k8s.io/v1beta2", "same", "up", "NoSchedule"))
    write(tmp_path, "alpha.yaml", RULE % ("resource.k8s.io/v1alpha3", "old", "old", "NoSchedule"))
    write(tmp_path, "v1.yaml", RULE % ("resource.k8s.io/v1", "newest", "new", "NoSchedule"))
    write(tmp_path, "ours.yaml", RULE % ("resource.dra-extender.io/v1alpha1", "same", "ours", "NoExecute"))
    write(
        tmp_path,
        "patches.yaml",
        "apiVersion: resource.dra-extender.io/v1alpha1\nkind: ResourceSlicePatch\nmetadata: {name: a}\n"
        "spec: {devices: {attributes: {gpu.example.com/model: {string: h100}}}}\n---\n"
        "apiVersion: resource.k8s.io/v1alpha3\nkind: ResourceSlicePatch\nmetadata: {name: b}\n"
        "spec: {devices: {priority: 2, attributes: {gpu.example.com/old: {'null': {}}}}}\n",
    )
    _, sink = await running()
    upstream, ours = sink.of(ev.DEVICE_TAINT_RULE, RES), sink.of(ev.DEVICE_TAINT_RULE, EXT)
    assert set(upstream) == {"same", "old", "newest"} and set(ours) == {"same"}
    assert parse_device_taint_rule(upstream["same"], group=RES).taint.key == "example.com/up"
    assert parse_device_taint_rule(ours["same"], group=EXT).taint.effect == "NoExecute"
    assert upstream["same"]["metadata"]["uid"] != ours["same"]["metadata"]["uid"]
    patches = sink.of(ev.RESOURCE_SLICE_PATCH, EXT)
    assert set(patches) == {"a", "b"}
    assert parse_resource_slice_patch(patches["b"]).priority == 2


async def test_other_kinds_are_ignored_with_one_line_per_kind(tmp_path: Path, running, caplog) -> None:
    caplog.set_level(logging.INFO, logger="dra_extender.source")
    deployment = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: %s}\n"
    write(
        tmp_path, "a.yaml", deployment % "d1" + "---\n" + deployment % "d2" + "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n"
    )
    write(tmp_path, "b.yaml", deployment % "d3" + "---\n" + NODE % "n1")
    source, sink = await running()
    lines = records(caplog, "ignoring objects of a kind")
    assert sorted(r.kind for r in lines) == ["ConfigMap", "Deployment"]  # type: ignore[attr-defined]
    assert source.load_report.ignored == {"Deployment": 3, "ConfigMap": 1}
    source.reload()
    assert len(records(caplog, "ignoring objects of a kind")) == 2
    assert set(sink.of(ev.NODE, "")) == {"n1"} and source.load_report.errors == ()


async def test_defaults_as_the_api_server_gives_them(tmp_path: Path, running) -> None:
    write(tmp_path, "pod.yaml", POD % "p1")
    write(tmp_path, "node.yaml", "apiVersion: v1\nkind: Node\nmetadata: {name: n1, namespace: ignored}\n")
    write(tmp_path, "claim.yaml", CLAIM % "c1")
    write(
        tmp_path,
        "kept.yaml",
        "apiVersion: v1\nkind: Node\nmetadata: {name: n2, uid: my-uid, creationTimestamp: '2020-01-01T00:00:00Z', resourceVersion: '999', generation: 7}\n",
    )
    _, sink = await running()
    pod = sink.of(ev.POD, "")["default/p1"]["metadata"]
    assert pod["namespace"] == "default"
    assert pod["creationTimestamp"] == T0S and pod["generation"] == 1
    assert uuid.UUID(pod["uid"]).version == 5
    assert "namespace" not in sink.of(ev.NODE, "")["n1"]["metadata"]
    assert set(sink.of(ev.RESOURCE_CLAIM, RES)) == {"ml/c1"}
    kept = sink.of(ev.NODE, "")["n2"]["metadata"]
    # uid and creationTimestamp from the file are kept; resourceVersion and generation are the server's.
    assert kept["uid"] == "my-uid" and kept["creationTimestamp"] == "2020-01-01T00:00:00Z"
    assert kept["generation"] == 1 and kept["resourceVersion"] != "999"
    versions = [int(o["metadata"]["resourceVersion"]) for o in sink.objects.values()]
    assert len(set(versions)) == len(versions)
    # A second source over the same files derives the same uids.
    _, again = await running()
    assert {k: o["metadata"]["uid"] for k, o in again.objects.items()} == {k: o["metadata"]["uid"] for k, o in sink.objects.items()}


async def test_yaml_timestamps_stay_strings(tmp_path: Path, running) -> None:
    write(
        tmp_path,
        "rule.yaml",
        "apiVersion: resource.k8s.io/v1beta2\nkind: DeviceTaintRule\nmetadata: {name: r, creationTimestamp: 2024-05-01T10:00:00Z}\n"
        "spec: {deviceSelector: {}, taint: {key: k, effect: NoSchedule, timeAdded: 2024-05-02T10:00:00Z}}\n",
    )
    _, sink = await running()
    rule = sink.of(ev.DEVICE_TAINT_RULE, RES)["r"]
    assert rule["metadata"]["creationTimestamp"] == "2024-05-01T10:00:00Z"
    assert rule["spec"]["taint"]["timeAdded"] == "2024-05-02T10:00:00Z"


async def test_time_added_is_filled_and_stays_while_the_taint_is_unchanged(tmp_path: Path, running) -> None:
    clock = Clock()
    write(tmp_path, "slice.yaml", slice_yaml("resource.k8s.io/v1"))
    write(tmp_path, "rule.yaml", RULE % ("resource.dra-extender.io/v1alpha1", "r", "maint", "NoSchedule"))
    write(
        tmp_path,
        "given.yaml",
        "apiVersion: resource.k8s.io/v1\nkind: DeviceTaintRule\nmetadata: {name: given}\n"
        "spec: {taint: {key: k, effect: None, timeAdded: '2025-01-01T00:00:00Z'}}\n",
    )
    source, sink = await running(clock=clock)

    def times() -> tuple[str, str, str]:
        s = sink.of(ev.RESOURCE_SLICE, RES)["s1"]["spec"]["devices"][0]["taints"][0]["timeAdded"]
        r = sink.of(ev.DEVICE_TAINT_RULE, EXT)["r"]["spec"]["taint"]["timeAdded"]
        g = sink.of(ev.DEVICE_TAINT_RULE, RES)["given"]["spec"]["taint"]["timeAdded"]
        return s, r, g

    assert times() == (T0S, T0S, "2025-01-01T00:00:00Z")
    clock.now = T0 + timedelta(hours=1)
    # Another attribute changes; the taint does not: its time stays.
    write(tmp_path, "slice.yaml", slice_yaml("resource.k8s.io/v1").replace("a100", "h100"))
    write(tmp_path, "rule.yaml", RULE % ("resource.dra-extender.io/v1alpha1", "r", "maint", "NoSchedule") + "  # comment\n")
    source.reload()
    assert sink.of(ev.RESOURCE_SLICE, RES)["s1"]["spec"]["devices"][0]["attributes"]["model"] == {"string": "h100"}
    assert times() == (T0S, T0S, "2025-01-01T00:00:00Z")
    # The rule's effect changes: the taint is new (upstream refreshes timeAdded then too).
    write(tmp_path, "rule.yaml", RULE % ("resource.dra-extender.io/v1alpha1", "r", "maint", "NoExecute"))
    source.reload()
    assert times() == (T0S, "2026-03-01T13:00:00Z", "2025-01-01T00:00:00Z")
    assert sink.of(ev.DEVICE_TAINT_RULE, EXT)["r"]["metadata"]["generation"] == 2


async def test_same_object_in_two_files_last_path_wins_with_a_warning(tmp_path: Path, running, caplog) -> None:
    caplog.set_level(logging.INFO, logger="dra_extender.source")
    first = write(tmp_path, "a/classes.yaml", CLASS % "gpu")
    second = write(tmp_path, "b.yaml", CLASS.replace("spec: {}", "spec: {selectors: [{cel: {expression: 'true'}}]}") % "gpu")
    source, sink = await running()
    assert sink.of(ev.DEVICE_CLASS, RES)["gpu"]["spec"]["selectors"]
    (warning,) = records(caplog, "defined twice")
    assert warning.levelno == logging.WARNING
    assert warning.path == str(second) and warning.overridden == str(first)  # type: ignore[attr-defined]
    source.reload()
    assert len(records(caplog, "defined twice")) == 1  # not repeated for unchanged files


@pytest.mark.parametrize(
    "content",
    [
        "kind: [unclosed\n  - : :\n",
        "apiVersion: v1\nkind: Node\nmetadata:\n\tname: tabs\n",
        "a: &x [*x\n",
        "\xff\xfe garbage \x00",
        "[" * 100_000,  # libyaml's composer would overflow the C stack
        "- " * 50_000 + "x\n",
        # A billion laughs: refused by its node count, before anything copies it.
        "apiVersion: v1\nkind: Node\nmetadata: {name: x}\nspec:\n  a: &a [x,x,x,x,x,x,x,x,x,x]\n"
        + "".join(f"  {c}: &{c} [{', '.join(['*' + p] * 10)}]\n" for p, c in zip("abcdefgh", "bcdefghi", strict=False)),
    ],
    ids=["yaml-syntax", "tab", "bad-alias", "binary", "deep-flow", "deep-block", "alias-bomb"],
)
async def test_a_file_that_does_not_parse_is_skipped_and_the_rest_loads(tmp_path: Path, running, caplog, content: str) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_bytes(content.encode("latin-1"))
    write(tmp_path, "bad.json", '{"apiVersion": "v1", "kind": "Node", ')
    write(tmp_path, "good.yaml", NODE % "n1")
    source, sink = await running()
    assert set(sink.of(ev.NODE, "")) == {"n1"}
    bad = {e.path for e in source.load_report.errors}
    assert bad == {str(broken), str(tmp_path / "bad.json")}
    assert all("does not parse" in e.message and e.object == "" for e in source.load_report.errors)
    assert {r.path for r in records(caplog, "does not parse")} == bad  # type: ignore[attr-defined]


INVALID = [
    # (document, object, field)
    ("kind: Node\nmetadata: {name: x}\n", "Node x", "apiVersion"),
    ("apiVersion: v1\nmetadata: {name: x}\n", "object x", "kind"),
    ("apiVersion: v1\nkind: Node\nmetadata: {labels: {a: b}}\n", "Node <unnamed>", "metadata.name"),
    ("apiVersion: v1\nkind: Node\n", "Node <unnamed>", "metadata"),
    ("apiVersion: v1\nkind: Node\nmetadata: {name: Not_A_Name}\n", "Node Not_A_Name", "metadata.name"),
    ("apiVersion: v1\nkind: Node\nmetadata: {name: x, labels: {a: 1}}\n", "Node x", "metadata.labels.a"),
    ("apiVersion: v1\nkind: Pod\nmetadata: {name: x, namespace: Bad/NS}\n", "Pod Bad/NS/x", "metadata.namespace"),
    ("apiVersion: resource.k8s.io/v2\nkind: DeviceClass\nmetadata: {name: x}\n", "DeviceClass x", "apiVersion"),
    ("apiVersion: resource.k8s.io/v1\nkind: Pod\nmetadata: {name: x}\n", "Pod default/x", "apiVersion"),
    (
        "apiVersion: resource.k8s.io/v1\nkind: ResourceSlice\nmetadata: {name: x}\nspec: {driver: d, nodeName: n, pool: {name: p}, devices: {}}\n",
        "ResourceSlice x",
        "spec.devices",
    ),
    (slice_yaml("resource.k8s.io/v1", "x", "{key: 'bad key!', effect: NoSchedule}"), "ResourceSlice x", "spec.devices[0].taints[0].key"),
    (
        "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {name: x}\nspec: {devices: {requests: [{name: r}]}}\n",
        "ResourceClaim default/x",
        "spec.devices.requests[0]",
    ),
    (
        "apiVersion: resource.dra-extender.io/v1alpha1\nkind: DeviceTaintRule\nmetadata: {name: x}\nspec: {taint: {effect: NoSchedule}}\n",
        "DeviceTaintRule x",
        "spec.taint.key",
    ),
    (
        "apiVersion: resource.dra-extender.io/v1alpha1\nkind: DeviceTaintRule\nmetadata: {name: x}\n"
        "spec: {deviceSelector: {selectors: ["
        + ", ".join(["{cel: {expression: 'true'}}"] * 11)
        + "]}, taint: {key: k, effect: NoSchedule}}\n",
        "DeviceTaintRule x",
        "spec.deviceSelector.selectors",
    ),
    (
        "apiVersion: resource.dra-extender.io/v1alpha1\nkind: DeviceTaintRule\nmetadata: {name: x}\nspec: {taint: {key: k, effect: NoExecute, evictionsPerSecond: 0}}\n",
        "DeviceTaintRule x",
        "spec.taint.evictionsPerSecond",
    ),
    (
        "apiVersion: resource.k8s.io/v1beta2\nkind: DeviceTaintRule\nmetadata: {name: x}\nspec: {taint: {key: k, value: '"
        + "v" * 64
        + "', effect: None}}\n",
        "DeviceTaintRule x",
        "spec.taint.value",
    ),
    (
        "apiVersion: resource.k8s.io/v1beta2\nkind: DeviceTaintRule\nmetadata: {name: x}\nspec: {taint: {key: k, effect: None, timeAdded: yesterday}}\n",
        "DeviceTaintRule x",
        "spec.taint.timeAdded",
    ),
    (
        "apiVersion: resource.dra-extender.io/v1alpha1\nkind: ResourceSlicePatch\nmetadata: {name: x}\n"
        "spec: {devices: {attributes: {d.example.com/a: {int: 1, string: s}}}}\n",
        "ResourceSlicePatch x",
        "spec.devices.attributes.d.example.com/a",
    ),
    (
        "apiVersion: resource.dra-extender.io/v1alpha1\nkind: ResourceSlicePatch\nmetadata: {name: x}\nspec: {devices: {attributes: {model: {string: s}}}}\n",
        "ResourceSlicePatch x",
        "spec.devices.attributes.model",
    ),
    (
        "apiVersion: resource.dra-extender.io/v1alpha1\nkind: ResourceSlicePatch\nmetadata: {name: x}\nspec: {devices: {capacity: {d.example.com/mem: {value: lots}}}}\n",
        "ResourceSlicePatch x",
        "spec.devices.capacity.d.example.com/mem.value",
    ),
    (
        "apiVersion: v1\nkind: Node\nmetadata: {name: x, annotations: {big: 123456789012345678901234567890}}\n",
        "Node x",
        "metadata.annotations.big",
    ),
    ("apiVersion: v1\nkind: Node\nmetadata: {name: x}\nspec: &s {loop: *s}\n", "Node x", ("spec" + ".loop" * 100)[:117] + "..."),
]


@pytest.mark.parametrize(("document", "obj", "field"), INVALID, ids=[f"{i}-{f or 'value'}" for i, (_, _, f) in enumerate(INVALID)])
async def test_an_invalid_object_is_skipped_alone_naming_path_object_and_field(
    tmp_path: Path, running, caplog, document: str, obj: str, field: str
) -> None:
    path = write(tmp_path, "mixed.yaml", NODE % "before" + "---\n" + document + "---\n" + NODE % "after")
    source, sink = await running()
    assert set(sink.of(ev.NODE, "")) == {"before", "after"}
    (error,) = source.load_report.errors
    assert (error.path, error.object, error.field) == (str(path), obj, field)
    (line,) = records(caplog, "skipping invalid object")
    assert (line.path, line.object, line.field) == (str(path), obj, field)  # type: ignore[attr-defined]


async def test_unknown_taint_effects_load(tmp_path: Path, running) -> None:
    write(tmp_path, "rule.yaml", RULE % ("resource.k8s.io/v1", "odd", "odd", "SomethingNew"))
    write(tmp_path, "slice.yaml", slice_yaml("resource.k8s.io/v1", taint="{key: example.com/x, effect: Later}"))
    source, sink = await running()
    assert source.load_report.errors == ()
    assert parse_device_taint_rule(sink.of(ev.DEVICE_TAINT_RULE, RES)["odd"], group=RES).taint.effect == "SomethingNew"
    assert parse_resource_slice(sink.of(ev.RESOURCE_SLICE, RES)["s1"]).devices[0].taints[0].effect == "Later"


# ----------------------------------------------------------------------------- live reload


async def test_files_added_changed_and_deleted_take_effect_while_running(tmp_path: Path, running) -> None:
    write(tmp_path, "nodes.yaml", NODE % "n1")
    _, sink = await running(watch=True)
    rule = write(tmp_path, "rules/new/r.yaml", RULE % ("resource.dra-extender.io/v1alpha1", "r", "maint", "NoSchedule"))
    await eventually(lambda: ("ADDED", ev.DEVICE_TAINT_RULE, "r") in sink.typed())
    added = sink.of(ev.DEVICE_TAINT_RULE, EXT)["r"]
    rule.write_text(RULE % ("resource.dra-extender.io/v1alpha1", "r", "maint", "NoExecute"))
    await eventually(lambda: ("MODIFIED", ev.DEVICE_TAINT_RULE, "r") in sink.typed())
    modified = sink.of(ev.DEVICE_TAINT_RULE, EXT)["r"]
    assert modified["spec"]["taint"]["effect"] == "NoExecute" and modified["metadata"]["generation"] == 2
    assert int(modified["metadata"]["resourceVersion"]) > int(added["metadata"]["resourceVersion"])
    assert modified["metadata"]["uid"] == added["metadata"]["uid"]
    rule.unlink()
    await eventually(lambda: ("DELETED", ev.DEVICE_TAINT_RULE, "r") in sink.typed())
    # Rewriting a file with the same bytes is not a change.
    write(tmp_path, "nodes.yaml", NODE % "n1")
    write(tmp_path, "marker.yaml", NODE % "marker")
    await eventually(lambda: ("ADDED", ev.NODE, "marker") in sink.typed())
    assert [e for e in sink.typed() if e[1] == ev.NODE] == [("ADDED", ev.NODE, "marker")]


async def test_run_is_cancel_safe_and_prompt(tmp_path: Path) -> None:
    write(tmp_path, "nodes.yaml", NODE % "n1")
    _, _, task = await start(tmp_path, watch=True)
    await asyncio.sleep(0.05)
    began = time.monotonic()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert time.monotonic() - began < 1.5


# ----------------------------------------------------------------------------- the write overlay


async def test_claim_status_survives_a_file_change_unless_the_file_sets_status(tmp_path: Path, running, caplog) -> None:
    caplog.set_level(logging.DEBUG, logger="dra_extender.source")
    path = write(tmp_path, "claim.yaml", CLAIM % "c1")
    source, sink = await running()
    claim = await source.get(ev.RESOURCE_CLAIM, "ml", "c1")
    assert claim is not None
    written = await source.update_claim_status({**claim, "status": ALLOCATED})
    assert int(written["metadata"]["resourceVersion"]) > int(claim["metadata"]["resourceVersion"])
    assert sink.events[-1].type == "MODIFIED" and sink.events[-1].object["status"] == ALLOCATED
    assert records(caplog, "recorded write in the overlay")
    # Same bytes: no event at all. A changed label: the allocation stays.
    path.write_text(CLAIM % "c1")
    source.reload()
    path.write_text((CLAIM % "c1").replace("namespace: ml}", "namespace: ml, labels: {team: a}}"))
    source.reload()
    current = sink.of(ev.RESOURCE_CLAIM, RES)["ml/c1"]
    assert current["metadata"]["labels"] == {"team": "a"} and current["status"] == ALLOCATED
    assert parse_resource_claim(current).allocation is not None
    # A file that sets status itself wins.
    path.write_text(CLAIM % "c1" + "status: {}\n")
    source.reload()
    assert sink.of(ev.RESOURCE_CLAIM, RES)["ml/c1"]["status"] == {}
    assert (await source.get(ev.RESOURCE_CLAIM, "ml", "c1"))["status"] == {}  # type: ignore[index]


async def test_claim_writes_check_resource_version_and_existence(tmp_path: Path, running) -> None:
    write(tmp_path, "claim.yaml", CLAIM % "c1")
    source, sink = await running()
    claim = await source.get(ev.RESOURCE_CLAIM, "ml", "c1")
    assert claim is not None
    fresh = await source.update_claim(
        {**claim, "metadata": {**claim["metadata"], "finalizers": ["resource.kubernetes.io/delete-protection"]}}
    )
    assert fresh["metadata"]["finalizers"] == ["resource.kubernetes.io/delete-protection"]
    with pytest.raises(Conflict):
        await source.update_claim_status({**claim, "status": ALLOCATED})  # stale resourceVersion
    with pytest.raises(Conflict):
        await source.update_claim(claim)
    with pytest.raises(Conflict):
        await source.update_claim_status({**fresh, "metadata": {**fresh["metadata"], "uid": "other"}})
    with pytest.raises(Invalid):
        await source.update_claim({**fresh, "spec": {"devices": {"requests": []}}})
    with pytest.raises(NotFound):
        await source.update_claim_status({"metadata": {"name": "nope", "namespace": "ml"}, "status": {}})
    done = await source.update_claim_status({**fresh, "status": ALLOCATED})
    assert done["metadata"]["finalizers"] == ["resource.kubernetes.io/delete-protection"] and done["status"] == ALLOCATED
    assert sink.of(ev.RESOURCE_CLAIM, RES)["ml/c1"] == done
    # The status subresource takes only status.
    ignored = await source.update_claim_status({**done, "metadata": {**done["metadata"], "labels": {"x": "y"}}, "status": {}})
    assert "labels" not in ignored["metadata"] and ignored["status"] == {}


async def test_bind_pod(tmp_path: Path, running) -> None:
    path = write(tmp_path, "pods.yaml", POD % "p1" + "---\n" + (POD % "bound").replace("spec: {", "spec: {nodeName: n9, "))
    source, sink = await running()
    pod = await source.get(ev.POD, "default", "p1")
    assert pod is not None
    uid = pod["metadata"]["uid"]
    with pytest.raises(Conflict):
        await source.bind_pod("default", "p1", "wrong-uid", "n1")
    with pytest.raises(NotFound):
        await source.bind_pod("default", "nope", "", "n1")
    with pytest.raises(Conflict):
        await source.bind_pod("default", "bound", "", "n1")
    await source.bind_pod("default", "p1", uid, "n1")
    assert sink.events[-1].type == "MODIFIED" and sink.events[-1].object["spec"]["nodeName"] == "n1"
    assert parse_pod(sink.of(ev.POD, "")["default/p1"]).node_name == "n1"
    with pytest.raises(Conflict, match="already assigned"):
        await source.bind_pod("default", "p1", uid, "n2")
    # The binding survives a file change that does not set nodeName ...
    path.write_text(path.read_text().replace("name: p1}", "name: p1, labels: {a: b}}"))
    source.reload()
    assert sink.of(ev.POD, "")["default/p1"]["spec"]["nodeName"] == "n1"
    # ... and yields to one that does.
    path.write_text(path.read_text().replace("spec: {containers", "spec: {nodeName: n7, containers", 1))
    source.reload()
    assert sink.of(ev.POD, "")["default/p1"]["spec"]["nodeName"] == "n7"


async def test_deleted_pod_stays_deleted_until_its_manifest_changes(tmp_path: Path, running) -> None:
    path = write(tmp_path, "pods.yaml", POD % "p1" + "---\n" + POD % "p2")
    source, sink = await running()
    pod = await source.get(ev.POD, "default", "p1")
    with pytest.raises(Conflict):
        await source.delete_pod("default", "p1", "wrong-uid")
    await source.delete_pod("default", "p1", pod["metadata"]["uid"])  # type: ignore[index]
    assert sink.typed()[-1] == ("DELETED", ev.POD, "default/p1")
    assert await source.get(ev.POD, "default", "p1") is None
    with pytest.raises(NotFound):
        await source.delete_pod("default", "p1", "")
    # Another object in the same file changes: p1 stays deleted.
    path.write_text(POD % "p1" + "---\n" + (POD % "p2").replace("name: p2}", "name: p2, labels: {a: b}}"))
    source.reload()
    assert "default/p1" not in sink.of(ev.POD, "")
    path.write_text((POD % "p1").replace("name: p1}", "name: p1, labels: {again: 'yes'}}") + "---\n" + POD % "p2")
    source.reload()
    assert ("ADDED", ev.POD, "default/p1") in sink.typed()
    assert sink.of(ev.POD, "")["default/p1"]["metadata"]["labels"] == {"again": "yes"}


async def test_pod_conditions_rule_status_and_events(tmp_path: Path, running) -> None:
    write(tmp_path, "pod.yaml", POD % "p1")
    write(
        tmp_path,
        "rules.yaml",
        RULE % ("resource.dra-extender.io/v1alpha1", "r", "x", "None") + "---\n" + RULE % ("resource.k8s.io/v1", "r", "y", "None"),
    )
    source, sink = await running()
    condition = {"type": "DisruptionTarget", "status": "True", "reason": "DeletionByDeviceTaintManager"}
    await source.update_pod_status_condition("default", "p1", condition)
    await source.update_pod_status_condition("default", "p1", {**condition, "status": "False"})
    conditions = sink.of(ev.POD, "")["default/p1"]["status"]["conditions"]
    assert conditions == [{**condition, "status": "False"}]
    before = int(sink.of(ev.DEVICE_TAINT_RULE, EXT)["r"]["metadata"]["resourceVersion"])
    await source.update_rule_status(EXT, "r", {"conditions": [{"type": "EvictionInProgress", "status": "False", "reason": "NoEffect"}]})
    rule = sink.of(ev.DEVICE_TAINT_RULE, EXT)["r"]
    assert sink.events[-1].group == EXT and int(rule["metadata"]["resourceVersion"]) > before
    assert rule["status"]["conditions"][0]["reason"] == "NoEffect" and rule["metadata"]["generation"] == 1
    assert "status" not in sink.of(ev.DEVICE_TAINT_RULE, RES)["r"]
    assert (await source.get(ev.DEVICE_TAINT_RULE, "", "r", group=EXT))["status"] == rule["status"]  # type: ignore[index]
    assert (await source.get(ev.DEVICE_TAINT_RULE, "", "r"))["spec"]["taint"]["key"] == "example.com/y"  # type: ignore[index]
    with pytest.raises(NotFound):
        await source.update_rule_status(EXT, "nope", {})
    await source.create_event(
        {"type": "Warning", "reason": "Faulty", "message": "m", "involvedObject": {"kind": "Pod", "name": "p1", "namespace": "default"}}
    )
    assert source.events[0]["reason"] == "Faulty"


# ----------------------------------------------------------------------------- fuzz

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats() | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)
_API = st.sampled_from(
    [
        ("v1", "Node"),
        ("v1", "Pod"),
        ("v1", "Namespace"),
        ("resource.k8s.io/v1", "ResourceSlice"),
        ("resource.k8s.io/v1beta1", "ResourceSlice"),
        ("resource.k8s.io/v1", "ResourceClaim"),
        ("resource.k8s.io/v1", "ResourceClaimTemplate"),
        ("resource.k8s.io/v1", "DeviceClass"),
        ("resource.k8s.io/v1beta2", "DeviceTaintRule"),
        ("resource.dra-extender.io/v1alpha1", "DeviceTaintRule"),
        ("resource.dra-extender.io/v1alpha1", "ResourceSlicePatch"),
        ("v1", "List"),
        ("apps/v1", "Deployment"),
    ]
)
_OBJECT = st.builds(
    lambda api, name, spec, extra: {"apiVersion": api[0], "kind": api[1], "metadata": {"name": name, **extra}, "spec": spec, "items": spec},
    _API,
    st.text(max_size=6) | st.sampled_from(["a", "b"]),
    _JSON,
    st.dictionaries(st.sampled_from(["namespace", "labels", "uid", "creationTimestamp"]), _JSON, max_size=2),
)
_CONTENT = st.one_of(
    st.binary(max_size=200),
    st.text(max_size=200).map(str.encode),
    st.lists(_OBJECT, max_size=3).map(lambda docs: yaml.safe_dump_all(docs, allow_unicode=True).encode()),
    _OBJECT.map(lambda doc: orjson.dumps(doc, option=orjson.OPT_NON_STR_KEYS, default=str).decode().encode()),
    st.sampled_from(
        [
            b"a: &a [*a, *a]\n",
            b"[" * 5000,
            b"{a: " * 3000,
            b"- " * 3000 + b"x\n",
            b"x: !!binary aGk=\n",
            b"x: !!set {a}\n",
            b"x: !!python/object:os.system {}\n",
            b"? [a]\n: b\n",
            b"1: 2\n",
            b"x: .nan\n",
            b"\xef\xbb\xbf{}",
            b"apiVersion: v1\nkind: List\nitems: [1, null, {kind: Node}]\n",
            b"apiVersion: v1\nkind: NodeList\nitems: [{metadata: {name: a}}, {metadata: {name: good}}]\n",
        ]
    ),
)


@settings(max_examples=examples(120), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(contents=st.lists(st.tuples(st.sampled_from(["f.yaml", "g.yml", "h.json", "sub/i.yaml"]), _CONTENT), max_size=3))
def test_fuzzed_files_never_escape_and_good_objects_still_load(tmp_path_factory: pytest.TempPathFactory, contents) -> None:
    directory = tmp_path_factory.mktemp("fuzz")
    (directory / "good.yaml").write_text(NODE % "good" + "---\n" + RULE % ("resource.dra-extender.io/v1alpha1", "good", "k", "NoSchedule"))
    source = ManifestSource(directory, clock=Clock(), watch=False)
    source.reload()
    for name, data in contents:
        path = directory / name
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(data)
        source.reload()  # reloads must cope with every intermediate state
    assert ("Node", "", "good") in source.store.objects
    assert ("DeviceTaintRule", EXT, "good") in source.store.objects
    for obj in source.store.objects.values():
        orjson.dumps(obj)  # everything emitted is plain JSON


# ----------------------------------------------------------------------------- the CRDs


def crd(name: str) -> dict[str, Any]:
    return yaml.safe_load((CRDS / f"{name}.resource.dra-extender.io.yaml").read_text())


@pytest.mark.parametrize("name", ["devicetaintrules", "resourceslicepatches"])
def test_crds_are_well_formed(name: str) -> None:
    doc = crd(name)
    spec = doc["spec"]
    assert doc["apiVersion"] == "apiextensions.k8s.io/v1" and doc["kind"] == "CustomResourceDefinition"
    assert doc["metadata"]["name"] == f"{spec['names']['plural']}.{spec['group']}" == f"{name}.resource.dra-extender.io"
    assert spec["group"] == EXT and spec["scope"] == "Cluster"
    assert spec["names"]["kind"] in (ev.DEVICE_TAINT_RULE, ev.RESOURCE_SLICE_PATCH)
    assert spec["names"]["listKind"] == spec["names"]["kind"] + "List"
    (version,) = spec["versions"]
    assert version["name"] == "v1alpha1" and version["served"] and version["storage"]
    assert version["subresources"] == {"status": {}}
    root = version["schema"]["openAPIV3Schema"]

    def walk(node: dict[str, Any], where: str) -> None:
        # Structural: every node says its type (or is int-or-string); CEL rules compile.
        assert node.get("type") or node.get("x-kubernetes-int-or-string"), where
        for rule in node.get("x-kubernetes-validations", ()):
            compile_rule(rule["rule"])  # the fake API server compiles and prices them in tests/fakeapi_tests/test_crds.py
            assert rule["message"]
        for k, sub in node.get("properties", {}).items():
            walk(sub, f"{where}.{k}")
        if isinstance(node.get("additionalProperties"), dict):
            walk(node["additionalProperties"], f"{where}.*")
        if "items" in node:
            walk(node["items"], f"{where}[]")

    walk(root, "")
    for column in version["additionalPrinterColumns"]:
        assert column["type"] in ("string", "integer", "date", "number", "boolean")
        node = root
        for part in re.sub(r"\[\?.*\]", "", column["jsonPath"]).strip(".").split("."):
            node = node["properties"][part] if part != "metadata" else {"properties": {"creationTimestamp": {}}}
            if "items" in node:
                node = node["items"]
    assert crd(name)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]["conditions"]


def _rule(spec: dict[str, Any]) -> dict[str, Any]:
    return objects.rule("x", group=objects.OUR_RULE_GROUP, spec=spec)


def _patch(devices: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.dra-extender.io/v1alpha1",
        "kind": "ResourceSlicePatch",
        "metadata": {"name": "x"},
        "spec": {"devices": devices},
    }


_TAINT = {"key": "example.com/k", "effect": "NoSchedule"}
AGREEMENT = [
    (_rule({"taint": _TAINT}), True),
    (
        _rule(
            {"deviceSelector": {}, "taint": {**_TAINT, "value": "v-1.x", "timeAdded": "2026-01-01T00:00:00Z", "evictionsPerSecond": 0.5}}
        ),
        True,
    ),
    (_rule({"taint": {**_TAINT, "effect": "FutureEffect"}}), False),  # our CRD's enum: it ships with the extender that reads it
    (_rule({"taint": {**_TAINT, "effect": "NoExecuted"}}), False),
    (_rule({"taint": {**_TAINT, "effect": "NoExecute"}}), True),
    (_rule({"taint": {**_TAINT, "key": "no/two/slashes"}}), False),
    (_rule({"taint": {**_TAINT, "key": "Upper.Case/k"}}), False),
    (_rule({"taint": {**_TAINT, "key": "x" * 64}}), False),
    (_rule({"taint": {**_TAINT, "key": "a." * 100 + "b/" + "c"}}), True),
    (_rule({"taint": {**_TAINT, "value": "-bad"}}), False),
    (_rule({"taint": {**_TAINT, "value": "v" * 64}}), False),
    (_rule({"taint": {**_TAINT, "effect": ""}}), False),
    (_rule({"taint": {"key": "k"}}), False),
    (_rule({"taint": {**_TAINT, "timeAdded": "2026-01-01"}}), False),
    (_rule({"taint": {**_TAINT, "evictionsPerSecond": 0}}), False),
    (_rule({"taint": {**_TAINT, "evictionsPerSecond": -1}}), False),
    (_rule({"deviceSelector": {"driver": "d" * 64}, "taint": _TAINT}), False),
    (_rule({"deviceSelector": {"selectors": [{"cel": {"expression": "true"}}] * 10}, "taint": _TAINT}), True),
    (_rule({"deviceSelector": {"selectors": [{"cel": {"expression": "true"}}] * 11}, "taint": _TAINT}), False),
    (_rule({"deviceSelector": {"selectors": [{"cel": {}}]}, "taint": _TAINT}), False),
    (_rule({}), False),
    (_patch({}), True),
    (_patch({"priority": 3, "filter": {"driver": "d", "selectors": [{"cel": {"expression": "true"}}]}}), True),
    (
        _patch({"attributes": {"d.example.com/a": {"int": 1}, "d.example.com/b": {"null": {}}, "d.example.com/c": {"version": "1.2.3"}}}),
        True,
    ),
    (_patch({"attributes": {"d.example.com/a": {"int": 1, "bool": True}}}), False),
    (_patch({"attributes": {"d.example.com/a": {}}}), False),
    (_patch({"attributes": {"d.example.com/a": {"null": {"x": 1}}}}), False),
    (_patch({"attributes": {"a": {"int": 1}}}), False),
    (_patch({"attributes": {"D.example.com/a": {"int": 1}}}), False),
    (_patch({"attributes": {"d.example.com/9a": {"int": 1}}}), False),
    (_patch({"attributes": {"d.example.com/" + "a" * 33: {"int": 1}}}), False),
    (_patch({"attributes": {"d" * 64 + "/a": {"int": 1}}}), False),
    (_patch({"attributes": {"d.example.com/s": {"string": "s" * 65}}}), False),
    (_patch({"capacity": {"d.example.com/mem": {"value": "40Gi"}, "d.example.com/n": {"value": 4}}}), True),
    (_patch({"capacity": {"d.example.com/mem": {}}}), False),
    (_patch({"capacity": {"mem": {"value": "1"}}}), False),
    (
        _patch(
            {
                "attributes": {f"d.example.com/a{i}": {"int": i} for i in range(20)},
                "capacity": {f"d.example.com/c{i}": {"value": "1"} for i in range(13)},
            }
        ),
        False,
    ),
    (
        _patch(
            {
                "attributes": {f"d.example.com/a{i}": {"int": i} for i in range(20)},
                "capacity": {f"d.example.com/c{i}": {"value": "1"} for i in range(12)},
            }
        ),
        True,
    ),
    (_patch({"filter": {"selectors": [{"cel": {"expression": "true"}}] * 33}}), False),
]


@pytest.mark.parametrize(("obj", "valid"), AGREEMENT, ids=[str(i) for i in range(len(AGREEMENT))])
def test_the_loader_and_the_crd_schemas_agree(tmp_path: Path, obj: dict[str, Any], valid: bool) -> None:
    name = "devicetaintrules" if obj["kind"] == ev.DEVICE_TAINT_RULE else "resourceslicepatches"
    schema = crd(name)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    # The fake API server's validator, on the object as written: a real server would first prune unknown
    # fields (`null: {x: 1}` becomes `null: {}`), which the loader refuses instead of dropping.
    errors = SchemaValidator(schema).validate(obj)
    assert (not errors) == valid, errors
    (tmp_path / "obj.json").write_bytes(orjson.dumps(obj))
    source = ManifestSource(tmp_path, clock=Clock(), watch=False)
    source.reload()
    assert (source.load_report.errors == ()) == valid, source.load_report.errors


def _reserve(claim: dict[str, Any], *pods: dict[str, Any]) -> dict[str, Any]:
    status = {**ALLOCATED, "reservedFor": [{"resource": "pods", "name": p["metadata"]["name"], "uid": p["metadata"]["uid"]} for p in pods]}
    meta = {**claim["metadata"], "finalizers": ["resource.kubernetes.io/delete-protection"]}
    return {**claim, "metadata": meta, "status": status}


@pytest.mark.parametrize("how", ["file-removed", "deleted-through-the-source"])
async def test_deleted_pod_releases_its_claims(tmp_path: Path, running, how: str) -> None:
    """As the resourceclaim controller does: a gone pod's reservations go; a claim nobody reserves is deallocated."""
    write(tmp_path, "claims.yaml", CLAIM % "solo" + "---\n" + CLAIM % "shared")
    pods = {
        name: write(tmp_path, f"{name}.yaml", (POD % name).replace(f"{{name: {name}}}", f"{{name: {name}, namespace: ml}}"))
        for name in ("p1", "p2")
    }
    source, sink = await running()
    p1, p2 = [await source.get(ev.POD, "ml", n) for n in ("p1", "p2")]
    for name, holders in (("solo", [p1]), ("shared", [p1, p2])):
        claim = await source.get(ev.RESOURCE_CLAIM, "ml", name)
        claim = await source.update_claim({**claim, "metadata": _reserve(claim, *holders)["metadata"]})
        await source.update_claim_status(_reserve(claim, *holders))
    if how == "file-removed":
        pods["p1"].unlink()
        source.reload()
    else:
        await source.delete_pod("ml", "p1", p1["metadata"]["uid"])
    solo, shared = sink.of(ev.RESOURCE_CLAIM, RES)["ml/solo"], sink.of(ev.RESOURCE_CLAIM, RES)["ml/shared"]
    assert "allocation" not in (solo.get("status") or {}) and not (solo.get("status") or {}).get("reservedFor")
    assert "finalizers" not in solo["metadata"], "a deallocated claim loses its delete protection"
    assert [r["name"] for r in shared["status"]["reservedFor"]] == ["p2"]
    assert shared["status"]["allocation"] == ALLOCATED["allocation"]
    assert shared["metadata"]["finalizers"] == ["resource.kubernetes.io/delete-protection"]


UNKNOWN_EFFECTS = [
    # name, file, document, field named in the warning, kind and name of the object
    (
        "rule",
        "rules/typo.yaml",
        RULE % ("resource.k8s.io/v1beta2", "r", "m", "Evict-Everything"),
        "spec.taint.effect",
        ev.DEVICE_TAINT_RULE,
        "r",
    ),
    (
        "slice-device-taint",
        "slice.yaml",
        slice_yaml("resource.k8s.io/v1", taint="{key: k, effect: Evict-Everything}"),
        "spec.devices[0].taints[0].effect",
        ev.RESOURCE_SLICE,
        "s1",
    ),
]


@pytest.mark.parametrize(("name", "path", "document", "field", "kind", "key"), UNKNOWN_EFFECTS, ids=[r[0] for r in UNKNOWN_EFFECTS])
async def test_unknown_taint_effect_loads_with_a_warning_naming_file_and_field(
    tmp_path: Path, running, caplog, name: str, path: str, document: str, field: str, kind: str, key: str
) -> None:
    caplog.set_level(logging.INFO, logger="dra_extender.source")
    written = write(tmp_path, path, document)
    source, sink = await running()
    assert key in sink.of(kind, RES), "the object loads (its unknown effect acts like None)"
    (warning,) = records(caplog, "unknown taint effect")
    assert warning.levelno == logging.WARNING
    assert warning.path == str(written) and warning.field == field and warning.effect == "Evict-Everything"  # type: ignore[attr-defined]
    source.reload()
    assert len(records(caplog, "unknown taint effect")) == 1, "not repeated for an unchanged file"


async def test_our_crds_rule_with_an_unknown_effect_is_refused_naming_the_field(tmp_path: Path, running) -> None:
    """`--source` refuses what our CRD's enum refuses in a cluster (a typo such as NoExecuted is not a drain that evicts
    nothing); the same effect on a resource.k8s.io rule loads (upstream allows effects newer versions add)."""
    write(tmp_path, "rules/ours.yaml", RULE % ("resource.dra-extender.io/v1alpha1", "ours", "drain", "NoExecuted"))
    write(tmp_path, "rules/upstream.yaml", RULE % ("resource.k8s.io/v1beta2", "upstream", "drain", "NoExecuted"))
    source, sink = await running()
    (error,) = source.load_report.errors
    assert (error.object, error.field) == ("DeviceTaintRule ours", "spec.taint.effect"), error
    assert error.message == 'Unsupported value: "NoExecuted": supported values: "None", "NoSchedule", "NoExecute"'
    assert "upstream" in sink.of(ev.DEVICE_TAINT_RULE, RES) and "ours" not in sink.of(ev.DEVICE_TAINT_RULE, ev.GROUP_EXTENDER)
