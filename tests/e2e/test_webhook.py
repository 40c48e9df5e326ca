"""`dra-extender webhook` end to end: TLS, the DeviceClasses of the fake API server, the pods it sets and those it leaves alone."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from kubesim.objects import pod
from tests.chart.api_calls import api_call
from tests.chart.render import objects
from tests.e2e.cluster import FakeApi, wait_for
from tests.e2e.harness import DEMO, ROOT, free_port, stop_process

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
    def __init__(self, api: FakeApi, cert: Path, key: Path, *extra: str) -> None:
        self.port = free_port()
        self.log = (api.dir / "webhook.log").open("wb")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "dra_extender.cli",
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
                *extra,
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


LIMITS = ("--max-body-bytes", "1048576", "--header-timeout", "2", "--body-timeout", "2")


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
    hook = Webhook(api, cert, key, *LIMITS, "--excluded-namespace", "kube-system")
    try:
        hook.wait(ca)
        yield hook, ca
    finally:
        hook.stop()
        api.stop()


def _pod(spec: dict[str, Any], metadata: dict[str, Any] | None = None) -> dict[str, Any]:
    out = pod("p", "ml", **spec)
    if metadata is not None:
        out["metadata"] = metadata
    return out


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
    "a zero request of a class's resource": (
        _resources("example.com/gpu") | {"containers": [{"name": "c", "resources": {"limits": {"example.com/gpu": "0"}}}]},
        False,
    ),
    "claims, generateName and no name yet": ({"resourceClaims": [{"name": "g", "resourceClaimTemplateName": "t"}]}, True),
    "claims in an excluded namespace": ({"resourceClaims": [{"name": "g", "resourceClaimName": "c"}]}, False),
}
# name -> (the review's namespace, the pod's metadata) where not the default
WHERE: dict[str, tuple[str, dict[str, Any]]] = {
    "claims, generateName and no name yet": ("ml", {"generateName": "job-"}),
    "claims in an excluded namespace": ("kube-system", {"name": "p", "namespace": "kube-system"}),
}


@pytest.mark.parametrize("case", PODS)
def test_sets_the_scheduler_only_on_pods_using_dra(case: str, webhook) -> None:
    hook, ca = webhook
    spec, sets = PODS[case]
    namespace, metadata = WHERE.get(case, ("ml", {"name": "p", "namespace": "ml"}))
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": f"uid-{case}",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "operation": "CREATE",
            "namespace": namespace,
            "object": _pod(spec, metadata),
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


def _review(**request: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "uid": "u1",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "operation": "CREATE",
        "namespace": "ml",
        "object": _pod({}),
    }
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {**base, **request}}


def _with_spec(**spec: Any) -> dict[str, Any]:
    return _review(object={"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec})


# name -> (the body, the field the 400 names)
MALFORMED: dict[str, tuple[Any, str]] = {
    "not JSON": (b"[1, 2", ""),
    "body not an object": ([1, 2], "(body)"),
    "no apiVersion": ({"kind": "AdmissionReview", "request": {}}, "apiVersion"),
    "apiVersion v1beta1": ({**_review(), "apiVersion": "admission.k8s.io/v1beta1"}, "apiVersion"),
    "kind not AdmissionReview": ({**_review(), "kind": "Pod"}, "kind"),
    "no request": ({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}, "request"),
    "request not an object": ({**_review(), "request": "pod"}, "request"),
    "missing uid": (_review(uid=None), "request.uid"),
    "uid not a string": (_review(uid=7), "request.uid"),
    "request.kind not an object": (_review(kind="Pod"), "request.kind"),
    "no operation": (_review(operation=None), "request.operation"),
    "object missing": (_review(object=None), "request.object"),
    "object not an object": (_review(object=[1]), "request.object"),
    "metadata not an object": (_review(object={"metadata": "p", "spec": {}}), "request.object.metadata"),
    "spec not an object": (_review(object={"metadata": {"name": "p"}, "spec": "x"}), "request.object.spec"),
    "containers not a list": (_with_spec(containers={"name": "c"}), "request.object.spec.containers"),
    "container not an object": (_with_spec(containers=["c"]), "request.object.spec.containers[0]"),
    "resources not an object": (
        _with_spec(containers=[{"name": "c", "resources": []}]),
        "request.object.spec.containers[0].resources",
    ),
    "resourceClaims not a list": (_with_spec(containers=[], resourceClaims="gpu"), "request.object.spec.resourceClaims"),
    "schedulerName not a string": (_with_spec(containers=[], schedulerName=5), "request.object.spec.schedulerName"),
}


@pytest.mark.parametrize("case", MALFORMED)
def test_a_malformed_review_is_400_naming_the_field(case: str, webhook) -> None:
    hook, ca = webhook
    body, field = MALFORMED[case]
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    r = httpx.post(
        hook.url + "/mutate",
        content=content,
        headers={"Content-Type": "application/json"},
        verify=ssl.create_default_context(cafile=str(ca)),
    )
    assert r.status_code == 400, r.text
    answer = r.json()
    assert answer["field"] == field and answer["error"].startswith(field), answer
    assert hook.proc.poll() is None


def test_only_json_is_accepted(webhook) -> None:
    hook, ca = webhook
    verify = ssl.create_default_context(cafile=str(ca))
    for content_type in ("text/plain", "application/x-www-form-urlencoded", "application/yaml"):
        r = httpx.post(hook.url + "/mutate", content=json.dumps(_review()).encode(), headers={"Content-Type": content_type}, verify=verify)
        assert r.status_code == 415 and "application/json" in r.text, (content_type, r.text)
    ok = httpx.post(hook.url + "/mutate", json=_review(), headers={"Content-Type": "application/json; charset=utf-8"}, verify=verify)
    assert ok.status_code == 200 and ok.json()["response"]["uid"] == "u1"


def _tls(hook: Webhook, ca: Path, timeout: float = 5.0) -> ssl.SSLSocket:
    raw = socket.create_connection(("127.0.0.1", hook.port), timeout=timeout)
    return ssl.create_default_context(cafile=str(ca)).wrap_socket(raw, server_hostname="127.0.0.1")


def _read_all(s: ssl.SSLSocket, wait: float) -> bytes:
    s.settimeout(wait)
    out = b""
    with contextlib.suppress(OSError):
        while chunk := s.recv(65536):
            out += chunk
    return out


def test_a_body_over_the_limit_is_413_without_being_read(webhook) -> None:
    """1 MiB limit (LIMITS): a declared 200 MiB body is refused at once; a chunked one once it passes the limit."""
    hook, ca = webhook
    heads = {
        "declared": b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 209715200\r\n\r\n",
        "chunked": b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n",
    }
    for name, head in heads.items():
        with _tls(hook, ca) as s:
            started = time.monotonic()
            s.sendall(head if name == "chunked" else head + b"{")
            if name == "chunked":
                with contextlib.suppress(OSError):  # refused before it is all sent: that is the point
                    for _ in range(3):
                        s.sendall(b"80000\r\n" + b" " * 0x80000 + b"\r\n")
            answer = _read_all(s, 5)
            assert answer.startswith(b"HTTP/1.1 413"), (name, answer[:200])
            assert b"over the limit of 1048576 bytes" in answer and time.monotonic() - started < 4, name
    assert hook.proc.poll() is None


def test_slow_clients_are_cut_off(webhook) -> None:
    """--header-timeout 2 / --body-timeout 2 (LIMITS): trickled headers are closed, a body that stops gets 408."""
    hook, ca = webhook
    heads = [_tls(hook, ca) for _ in range(10)]
    for s in heads:
        s.sendall(b"POST /mutate HTTP/1.1\r\nHost: x\r\n")  # and never the end of the headers
    bodies = [_tls(hook, ca) for _ in range(10)]
    for s in bodies:
        s.sendall(b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{")
    started = time.monotonic()
    for s in heads:
        assert _read_all(s, 6) == b"", "a connection without complete headers must be closed"
        s.close()
    for s in bodies:
        assert _read_all(s, 6).startswith(b"HTTP/1.1 408"), "a body that does not arrive gets 408"
        s.close()
    assert time.monotonic() - started < 8


def test_a_client_that_hangs_up_leaves_no_traceback(webhook) -> None:
    hook, ca = webhook
    for _ in range(5):
        with _tls(hook, ca) as s:
            s.sendall(b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{")
    verify = ssl.create_default_context(cafile=str(ca))
    assert httpx.post(hook.url + "/mutate", json=_review(), verify=verify).status_code == 200  # served after them
    logs = hook.log_path.read_text()
    assert "Traceback" not in logs and "ClientDisconnect" not in logs and "Exception in ASGI" not in logs, logs[-3000:]


def test_a_class_created_just_before_its_pod_is_known_from_the_watch(tmp_path) -> None:
    """The DeviceClass arrives through the watch: the pod asking for its resource is mutated at once, and
    no /mutate lists DeviceClasses (it used to re-list inside the request, at most every 30 s)."""
    ca, cert, key = make_certs(tmp_path)
    api = FakeApi(DEMO)
    hook = Webhook(api, cert, key)
    verify = ssl.create_default_context(cafile=str(ca))
    try:
        hook.wait(ca)
        review = _review(object=_pod(_resources("example.com/fresh")))
        before = httpx.post(hook.url + "/mutate", json=review, verify=verify).json()["response"]
        assert "patch" not in before, "no class serves example.com/fresh yet"
        mark = len(api.requests())
        api.create(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceClass",
                "metadata": {"name": "fresh"},
                "spec": {"extendedResourceName": "example.com/fresh"},
            }
        )
        # The watch event is on its way: ask until it is applied (milliseconds; the old cache took up to 30 s).
        started = time.monotonic()
        answer = wait_for(
            lambda: httpx.post(hook.url + "/mutate", json=review, verify=verify).json()["response"].get("patch"),
            timeout=5,
            what="the new class's pod mutated",
        )
        print(f"mutated {time.monotonic() - started:.3f} s after the class was created")
        assert json.loads(base64.b64decode(answer)) == [{"op": "add", "path": "/spec/schedulerName", "value": SCHEDULER}]
        lists = [r for r in api.requests(mark) if r["resource"] == "deviceclasses" and r["verb"] == "list"]
        assert not lists, lists
        assert httpx.get(hook.url + "/readyz", verify=verify).status_code == 200  # the probe the chart's readinessProbe reads
        # The chart's ClusterRole grants what the webhook asks the API server for: no more, no less.
        made = {
            (c.verb, c.group, c.resource)
            for r in api.requests()
            if not r["user_agent"].startswith("python-httpx") and (c := api_call(r["method"], r["path"], r["query"])) is not None
        }
        [role] = [
            o for o in objects({"webhook": {"enabled": True}}) if o["kind"] == "ClusterRole" and o["metadata"]["name"].endswith("-webhook")
        ]
        granted = {(v, g, res) for rule in role["rules"] for g in rule["apiGroups"] for res in rule["resources"] for v in rule["verbs"]}
        assert made == granted, (made, granted)
    finally:
        hook.stop()
        api.stop()


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


def test_without_the_device_classes_it_fails_closed(tmp_path) -> None:
    """The DeviceClasses cannot be listed: not ready, and a pod whose resources may be DRA-backed is refused
    (never admitted unchanged for the default scheduler); a pod with claims needs no class and is still sent."""
    ca, cert, key = make_certs(tmp_path)
    api = FakeApi(DEMO)
    api.faults(error_rate=1.0, error_status=500, paths=["deviceclasses"])
    hook = Webhook(api, cert, key)
    verify = ssl.create_default_context(cafile=str(ca))
    try:
        hook.wait(ca)
        ready = httpx.get(hook.url + "/readyz", verify=verify)
        assert ready.status_code == 503 and "DeviceClasses not listed yet" in ready.text
        maybe = httpx.post(hook.url + "/mutate", json=_review(object=_pod(_resources("example.com/gpu"))), verify=verify, timeout=10)
        response = maybe.json()["response"]
        assert maybe.status_code == 200 and response["allowed"] is False and response["status"]["code"] == 503, response
        assert "cannot tell whether the pod uses DRA" in response["status"]["message"]
        claims = httpx.post(
            hook.url + "/mutate", json=_review(object=_pod({"resourceClaims": [{"name": "g", "resourceClaimName": "c"}]})), verify=verify
        )
        assert claims.json()["response"]["allowed"] is True and "patch" in claims.json()["response"]
        api.clear_faults()
        wait_for(lambda: httpx.get(hook.url + "/readyz", verify=verify).status_code == 200, what="ready once the list succeeds")
        known = httpx.post(hook.url + "/mutate", json=_review(object=_pod(_resources("example.com/gpu"))), verify=verify).json()["response"]
        assert known["allowed"] is True and "patch" not in known  # no class names example.com/gpu in the demo cluster
    finally:
        hook.stop()
        api.stop()
