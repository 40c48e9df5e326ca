"""The resource registry, discovery's parsing, and the Events built about objects."""

from __future__ import annotations

import pytest

from tracker import events as ev
from tracker.apiserver.discovery import parse_resource_list
from tracker.k8s_events import event_object, problem_event
from tracker.resources import REQUIRED_KINDS, api_version, resource_for, upstream_rules
from tracker.store import Problem


@pytest.mark.parametrize(
    ("kind", "group", "namespace", "name", "path"),
    [
        (ev.POD, ev.GROUP_CORE, "ns", "p", "/api/v1/namespaces/ns/pods/p"),
        (ev.NODE, ev.GROUP_CORE, "", "n", "/api/v1/nodes/n"),
        (ev.RESOURCE_CLAIM, ev.GROUP_RESOURCE, "ns", "c", "/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/c"),
        (ev.RESOURCE_SLICE, ev.GROUP_RESOURCE, "", "s", "/apis/resource.k8s.io/v1/resourceslices/s"),
        (ev.DEVICE_TAINT_RULE, ev.GROUP_RESOURCE, "", "r", "/apis/resource.k8s.io/v1beta2/devicetaintrules/r"),
        (ev.DEVICE_TAINT_RULE, ev.GROUP_EXTENDER, "", "r", "/apis/resource.dra-extender.io/v1alpha1/devicetaintrules/r"),
        (ev.RESOURCE_SLICE_PATCH, ev.GROUP_EXTENDER, "", "p", "/apis/resource.dra-extender.io/v1alpha1/resourceslicepatches/p"),
        (ev.PERSISTENT_VOLUME_CLAIM, ev.GROUP_CORE, "ns", "v", "/api/v1/namespaces/ns/persistentvolumeclaims/v"),
    ],
)
def test_paths(kind: str, group: str, namespace: str, name: str, path: str) -> None:
    assert resource_for(kind, group).item(namespace, name) == path


def test_upstream_rules_at_the_served_version() -> None:
    assert resource_for(ev.DEVICE_TAINT_RULE, ev.GROUP_RESOURCE, "v1").item("", "r") == "/apis/resource.k8s.io/v1/devicetaintrules/r"
    assert upstream_rules("v1alpha3").api_version == "resource.k8s.io/v1alpha3"


@pytest.mark.parametrize(
    ("kind", "group", "served", "expected"),
    [
        (ev.POD, ev.GROUP_CORE, None, "v1"),
        (ev.PERSISTENT_VOLUME, ev.GROUP_CORE, None, "v1"),
        (ev.DEVICE_CLASS, ev.GROUP_RESOURCE, None, "resource.k8s.io/v1"),
        (ev.DEVICE_TAINT_RULE, ev.GROUP_RESOURCE, None, "resource.k8s.io/v1beta2"),
        (ev.DEVICE_TAINT_RULE, ev.GROUP_RESOURCE, "v1", "resource.k8s.io/v1"),
        (ev.DEVICE_TAINT_RULE, ev.GROUP_EXTENDER, "v1", "resource.dra-extender.io/v1alpha1"),
        (ev.RESOURCE_SLICE_PATCH, ev.GROUP_EXTENDER, None, "resource.dra-extender.io/v1alpha1"),
        ("Widget", "example.com", None, "example.com"),
    ],
)
def test_api_version(kind: str, group: str, served: str | None, expected: str) -> None:
    assert api_version(kind, group, served) == expected


def test_required_kinds() -> None:
    assert (ev.DEVICE_TAINT_RULE, ev.GROUP_RESOURCE) in REQUIRED_KINDS
    assert (ev.RESOURCE_SLICE_PATCH, ev.GROUP_EXTENDER) in REQUIRED_KINDS
    assert (ev.NAMESPACE, ev.GROUP_CORE) not in REQUIRED_KINDS  # the manifest source tracks it; nothing waits for it
    assert len(REQUIRED_KINDS) == 11


def test_parse_resource_list() -> None:
    assert parse_resource_list(b'{"resources": [{"name": "devicetaintrules"}, {"name": "devicetaintrules/status"}]}') == {
        "devicetaintrules",
        "devicetaintrules/status",
    }
    with pytest.raises(ValueError):
        parse_resource_list(b"<html>")


def test_problem_event_and_event_object() -> None:
    event = problem_event(Problem(ev.RESOURCE_CLAIM, ev.GROUP_RESOURCE, "ns/c", "bad selector", "u1"), "resource.k8s.io/v1")
    assert event == {
        "type": "Warning",
        "reason": "InvalidSelector",
        "message": "bad selector",
        "involvedObject": {"kind": "ResourceClaim", "name": "c", "namespace": "ns", "uid": "u1", "apiVersion": "resource.k8s.io/v1"},
    }
    body = event_object(event, now=0.0)
    assert body["metadata"] == {"generateName": "c.", "namespace": "ns"}
    assert (body["firstTimestamp"], body["source"], body["count"]) == ("1970-01-01T00:00:00Z", {"component": "dra-extender"}, 1)
    cluster_scoped = event_object(problem_event(Problem(ev.DEVICE_CLASS, ev.GROUP_RESOURCE, "gpu", "broken"), "resource.k8s.io/v1"))
    assert cluster_scoped["metadata"]["namespace"] == "default" and cluster_scoped["reason"] == "Invalid"
