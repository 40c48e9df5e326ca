"""kubernetes-asyncio loaded without its generated models (tracker/apiserver/client_modules.py), in a fresh interpreter each.

Each row runs a script in a new process (this one has long imported the
whole package): it connects an ApiSource to the in-repo fake API server,
lists nodes through the client, and reports which of the package's modules
are loaded; rows then import the package the usual way to show it is whole.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import asyncio, json, sys, tempfile
from kubesim.fakeapi import FakeApiServer
from tracker.apiserver.source import ApiSource

def loaded():
    return sorted(m for m in sys.modules if m == "kubernetes_asyncio" or m.startswith("kubernetes_asyncio."))

async def main():
    out = {}
    async with FakeApiServer() as api:
        api.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}})
        kubeconfig = api.write_kubeconfig(tempfile.mkdtemp() + "/kc.yaml")
        BEFORE
        source = ApiSource(kubeconfig=str(kubeconfig))
        await source.connect()
        status, body = await source.request("GET", "/api/v1/nodes")
        out["list"] = [status, [n["metadata"]["name"] for n in json.loads(body)["items"]]]
        out["modules_after_connect"] = len(loaded())
        out["models_after_connect"] = "kubernetes_asyncio.client.models.v1_node" in sys.modules
        AFTER
        await source.close()
    print(json.dumps(out))

asyncio.run(main())
"""

USUAL = """
        from kubernetes_asyncio import client as usual_client
        import kubernetes_asyncio, kubernetes_asyncio.client.models as models
        nodes = await usual_client.CoreV1Api(source._api).list_node()
        out["usual"] = [kubernetes_asyncio.__version__ != "", models.V1Node.__name__, [n.metadata.name for n in nodes.items]]
        out["models_after_usual"] = "kubernetes_asyncio.client.models.v1_node" in sys.modules
"""

ROWS = [
    pytest.param(
        "", "", {"list": [200, ["n1"]], "modules_after_connect": "few", "models_after_connect": False}, id="lean: connects and lists"
    ),
    pytest.param(
        "",
        USUAL,
        {
            "list": [200, ["n1"]],
            "modules_after_connect": "few",
            "models_after_connect": False,
            "usual": [True, "V1Node", ["n1"]],
            "models_after_usual": True,
        },
        id="lean, then the usual import: the package completes itself",
    ),
    pytest.param(
        "import kubernetes_asyncio.client",
        "",
        {"list": [200, ["n1"]], "modules_after_connect": "many", "models_after_connect": True},
        id="already imported whole: used as it is",
    ),
    pytest.param(
        'sys.modules["kubernetes_asyncio.client.configuration"] = None  # a layout the lean load does not know',
        "",
        {"list": [200, ["n1"]], "modules_after_connect": "many", "models_after_connect": True},
        id="a module the lean load needs cannot be imported: the plain import, whole",
    ),
]


@pytest.mark.parametrize(("before", "after", "expected"), ROWS)
def test_client_modules(before: str, after: str, expected: dict) -> None:
    script = SCRIPT.replace("BEFORE", before or "pass").replace("AFTER", after.strip().replace("\n        ", "\n        ") or "pass")
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    modules = out.pop("modules_after_connect")
    # The whole package is ~860 modules; configuration, ApiClient, rest and the config loaders are ~20.
    assert (modules < 40) if expected["modules_after_connect"] == "few" else (modules > 500), modules
    assert out == {k: v for k, v in expected.items() if k != "modules_after_connect"}
