"""`dra-extender webhook` end to end: TLS, the DeviceClasses of the fake API server, the pods it sets and those it leaves alone."""

from __future__ import annotations

import base64
import json
import os
import shutil
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.cluster import FakeApi
from tests.e2e.harness import DEMO, ROOT, free_port, stop_process

pytestmark = pytest.mark.e2e

SCHEDULER = "dra-scheduler"


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def make_certs(directory: Path) -> tuple[Path, Path, Path]:
    """A CA and a serving certificate for 127.0.0.1 signed by it, as the chart's genCA/genSignedCert make them."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make the test certificates")
    ca_key, ca, key, csr, cert = (directory / n for n in ("ca.key", "ca.crt", "tls.key", "tls.csr", "tls.crt"))
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(ca_key), "-out", str(ca), "-days", "1", "-subj", "/CN=test-ca")
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr), "-subj", "/CN=127.0.0.1")
    ext = directory / "san.cnf"
    ext.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    _openssl(
        "x509",
        "-req",
        "-in",
        str(csr),
        "-CA",
        str(ca),
        "-CAkey",
        str(ca_key),
        "-CAcreateserial",
        "-out",
        str(cert),
        "-days",
        "1",
        "-extfile",
        str(ext),
    )
    return ca, cert, key


class Webhook:
    def __init__(self, api: FakeApi, cert: Path, key: Path) -> None:
        self.port = free_port()
        self.log = (api.dir / "webhook.log").open("wb")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "extender.cli",
                "webhook",
                "--kubeconfig",
                str(api.kubeconfig),
                "--listen",
                f"127.0.0.1:{self.port}",
                "--tls-reload-seconds",
                "0.2",
                "--tls-cert-file",
                str(cert),
                "--tls-key-file",
                str(key),
                "--scheduler-name",
                SCHEDULER,
                "--log-level",
                "debug",
            ],
            cwd=ROOT,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env={k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"},
        )
        self.url = f"https://127.0.0.1:{self.port}"
        self.log_path = api.dir / "webhook.log"

    def wait(self, ca: Path) -> None:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log_path.read_text()
            try:
                if httpx.get(self.url + "/healthz", verify=ssl.create_default_context(cafile=str(ca))).status_code == 200:
                    return
            except httpx.TransportError:
                time.sleep(0.1)
        raise TimeoutError(self.log_path.read_text())

    def stop(self) -> None:
        stop_process(self.proc)
        self.log.close()


@pytest.fixture(scope="module")
def webhook(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Webhook, Path]]:
    ca, cert, key = make_certs(tmp_path_factory.mktemp("certs"))
    api = FakeApi(DEMO)
    api.create(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": "big-gpu"},
            "spec": {"selectors": [{"cel": {"expression": "true"}}], "extendedResourceName": "example.com/gpu"},
        }
    )
    hook = Webhook(api, cert, key)
    try:
        hook.wait(ca)
        yield hook, ca
    finally:
        hook.stop()
        api.stop()


def _pod(spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ml"},
        "spec": {"containers": [{"name": "c", "image": "x"}], **spec},
    }


def _resources(name: str) -> dict[str, Any]:
    return {"containers": [{"name": "c", "image": "x", "resources": {"limits": {name: "1"}, "requests": {"cpu": "1"}}}]}


# name -> (pod spec fields, whether the webhook sets schedulerName)
PODS: dict[str, tuple[dict[str, Any], bool]] = {
    "resource claims": ({"resourceClaims": [{"name": "gpu", "resourceClaimName": "c"}]}, True),
    "claims, default-scheduler named": (
        {"schedulerName": "default-scheduler", "resourceClaims": [{"name": "g", "resourceClaimName": "c"}]},
        True,
    ),
    "a class's extendedResourceName": (_resources("example.com/gpu"), True),
    "the implicit deviceclass name": (_resources("deviceclass.resource.kubernetes.io/gpu.example.com"), True),
    "extended resource in an init container": (
        {"initContainers": [{"name": "i", "image": "x", "resources": {"requests": {"example.com/gpu": "1"}}}]},
        True,
    ),
    "no DRA at all": ({}, False),
    "a device-plugin resource": (_resources("nvidia.com/gpu"), False),
    "claims, another scheduler asked for": (
        {"schedulerName": "volcano", "resourceClaims": [{"name": "g", "resourceClaimName": "c"}]},
        False,
    ),
    "claims, already ours": ({"schedulerName": SCHEDULER, "resourceClaims": [{"name": "g", "resourceClaimName": "c"}]}, False),
    "claims, already bound": ({"nodeName": "node-a", "resourceClaims": [{"name": "g", "resourceClaimName": "c"}]}, False),
    "empty resourceClaims": ({"resourceClaims": []}, False),
}


@pytest.mark.parametrize("case", PODS)
def test_sets_the_scheduler_only_on_pods_using_dra(case: str, webhook) -> None:
    hook, ca = webhook
    spec, sets = PODS[case]
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": f"uid-{case}",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "operation": "CREATE",
            "namespace": "ml",
            "object": _pod(spec),
        },
    }
    r = httpx.post(hook.url + "/mutate", json=review, verify=ssl.create_default_context(cafile=str(ca)))
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
    response = answer["response"]
    assert response["uid"] == f"uid-{case}" and response["allowed"] is True
    if sets:
        assert response["patchType"] == "JSONPatch"
        assert json.loads(base64.b64decode(response["patch"])) == [{"op": "add", "path": "/spec/schedulerName", "value": SCHEDULER}]
    else:
        assert "patch" not in response and "patchType" not in response


def test_tls_only_with_the_right_ca(webhook, tmp_path) -> None:
    hook, _ca = webhook
    with pytest.raises(httpx.TransportError):  # plain HTTP to the TLS port
        httpx.get(f"http://127.0.0.1:{hook.port}/healthz", timeout=5)
    other_ca, _, _ = make_certs(tmp_path)
    with pytest.raises(httpx.ConnectError) as e:
        httpx.get(hook.url + "/healthz", verify=ssl.create_default_context(cafile=str(other_ca)), timeout=5)
    assert isinstance(e.value.__context__, ssl.SSLCertVerificationError) or "CERTIFICATE_VERIFY_FAILED" in str(e.value)


def test_a_bad_review_is_400_not_a_crash(webhook) -> None:
    hook, ca = webhook
    r = httpx.post(hook.url + "/mutate", content=b"[1, 2", verify=ssl.create_default_context(cafile=str(ca)))
    assert r.status_code == 400 and "bad AdmissionReview" in r.text
    assert hook.proc.poll() is None


def test_a_renewed_certificate_is_served_without_a_restart(tmp_path) -> None:
    (tmp_path / "old").mkdir()
    ca, cert, key = make_certs(tmp_path / "old")
    api = FakeApi(DEMO)
    hook = Webhook(api, cert, key)
    try:
        hook.wait(ca)
        (tmp_path / "new").mkdir()
        new_ca, new_cert, new_key = make_certs(tmp_path / "new")
        shutil.copy(new_key, key)
        shutil.copy(new_cert, cert)
        deadline = time.monotonic() + 10
        while True:
            try:
                if httpx.get(hook.url + "/healthz", verify=ssl.create_default_context(cafile=str(new_ca)), timeout=2).status_code == 200:
                    break
            except httpx.ConnectError:
                assert time.monotonic() < deadline, hook.log_path.read_text()
                time.sleep(0.2)
        assert hook.proc.poll() is None and "loaded a renewed serving certificate" in hook.log_path.read_text()
    finally:
        hook.stop()
        api.stop()
