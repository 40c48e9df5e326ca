"""The alert receiver of a real `dra-extender controllers` process: TLS, bearer token, the worked example's files, kubectl dra health."""

from __future__ import annotations

import ssl
import time
from pathlib import Path

import httpx
import pytest

from tests.e2e.cluster import FakeApi
from tests.e2e.harness import DEMO, ROOT, Extender, free_port
from tests.e2e.test_kubectl_dra import dra
from tests.e2e.test_webhook import make_certs

EXAMPLES = ROOT / "examples" / "health"


def test_the_receiver_over_tls_takes_the_worked_examples_alerts(tmp_path: Path) -> None:
    ca, cert, key = make_certs(tmp_path)
    api = FakeApi(DEMO, EXAMPLES / "policy.yaml")
    port = free_port()
    ext = Extender(
        "--kubeconfig", str(api.kubeconfig), "--standalone", "--alerts-listen", f"127.0.0.1:{port}", "--alerts-token-file", str(EXAMPLES / "token"),
        "--alerts-tls-cert-file", str(cert), "--alerts-tls-key-file", str(key), command="controllers",
    )  # fmt: skip
    token = (EXAMPLES / "token").read_text().strip()
    try:
        ext.wait_ready()
        with httpx.Client(base_url=f"https://127.0.0.1:{port}", verify=ssl.create_default_context(cafile=str(ca)), timeout=10) as client:
            headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
            assert client.post("/alerts", content=b"{}", headers={**headers, "Authorization": "Bearer nope"}).status_code == 401
            deadline = time.monotonic() + 30
            while True:  # 503 while the process syncs, as Alertmanager would see it (and retry)
                r = client.post("/alerts", content=(EXAMPLES / "alert-firing.json").read_bytes(), headers=headers)
                if r.status_code != 503 or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            assert (r.status_code, r.json()) == (200, {"alerts": {"firing": 1}})
            with pytest.raises(httpx.TransportError):  # TLS only: plain HTTP is not answered
                httpx.post(f"http://127.0.0.1:{port}/alerts", content=b"{}", headers=headers, timeout=5)
        out = dra(api, "health").stdout
        assert "gpu.example.com/node-a/gpu-0" in out and "xid-79" in out and "NoSchedule" in out, out
    finally:
        ext.stop()
        api.stop()
