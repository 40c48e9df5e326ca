"""The operator guide's feature examples, run: `python -m tests.docs.feature_examples` rewrites their output blocks.

Each directory under examples/ named in EXAMPLES is a small cluster with
one pod waiting to be scheduled. Its block in docs/operator-guide.md (between
`<!-- example NAME -->` and `<!-- /example NAME -->`) shows what
`kubectl dra devices -o wide` and `kubectl dra why POD` print against a
fake API server holding those manifests, and what `dra-extender serve
--source examples/NAME` answers at /filter for that pod.
tests/e2e/test_feature_examples.py fails when a block differs from what the
code prints now.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from tests.e2e.harness import ROOT

GUIDE = ROOT / "docs" / "operator-guide.md"

# example directory -> the pod waiting to be scheduled (namespace default)
EXAMPLES = {
    "partitionable-gpus": "inference",
    "shared-devices": "train-c",
    "binding-conditions": "trainer",
    "extended-resources": "pair",
}


def directory(name: str) -> Path:
    return ROOT / "examples" / name


def manifests(name: str) -> list[dict[str, Any]]:
    return [d for p in sorted(directory(name).glob("*.yaml")) for d in yaml.safe_load_all(p.read_text()) if d]


def filter_body(name: str) -> dict[str, Any]:
    """kube-scheduler's ExtenderArgs for the waiting pod over every node (nodeCacheCapable: names only)."""
    objs = manifests(name)
    [pod] = [o for o in objs if o["kind"] == "Pod" and o["metadata"]["name"] == EXAMPLES[name]]
    nodes = sorted(o["metadata"]["name"] for o in objs if o["kind"] == "Node")
    return {"Pod": pod, "NodeNames": nodes}


def _block(lang: str, text: str) -> list[str]:
    return [f"```{lang}", *(line.rstrip() for line in text.rstrip("\n").splitlines()), "```"]


def render(name: str, devices: str, why: str, filtered: dict[str, Any]) -> str:
    """The markdown between the markers, from what the commands printed."""
    pod = EXAMPLES[name]
    lines = [
        f"<!-- example {name} -->",
        *_block("sh", "kubectl dra devices -o wide"),
        *_block("", devices),
        *_block("sh", f"kubectl dra why {pod}"),
        *_block("", why),
        "",
        f"`dra-extender serve --source examples/{name}` answers kube-scheduler's `/filter` for `{pod}` over every node with:",
        "",
        *_block("json", json.dumps(filtered, indent=4)),
        f"<!-- /example {name} -->",
    ]
    return "\n".join(lines)


def block_in_guide(name: str, text: str | None = None) -> str | None:
    text = GUIDE.read_text() if text is None else text
    found = re.search(rf"<!-- example {re.escape(name)} -->\n.*?<!-- /example {re.escape(name)} -->", text, re.S)
    return found.group(0) if found else None


def run(name: str) -> str:
    """Run the commands against the example and render its block."""
    from tests.e2e.cluster import FakeApi
    from tests.e2e.harness import Extender
    from tests.e2e.test_kubectl_dra import dra

    api = FakeApi(directory(name))
    try:
        devices = dra(api, "devices", "-o", "wide").stdout
        why = dra(api, "why", EXAMPLES[name]).stdout
    finally:
        api.stop()
    ext = Extender("--source", str(directory(name)))
    try:
        ext.wait_ready()
        response = ext.post("filter", filter_body(name))
        assert response.status_code == 200, response.text
        filtered = response.json()
    finally:
        ext.stop()
    return render(name, devices, why, filtered)


def write() -> None:
    text = GUIDE.read_text()
    for name in EXAMPLES:
        old = block_in_guide(name, text)
        if old is None:
            raise SystemExit(f"docs/operator-guide.md has no <!-- example {name} --> block")
        text = text.replace(old, run(name))
    GUIDE.write_text(text)


if __name__ == "__main__":
    write()
