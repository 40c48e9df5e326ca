"""An exception inside a verb is answered (the scheduler must get an answer), logged and counted."""

from __future__ import annotations

import logging

import httpx
import orjson
import pytest

from extender.app import create_app
from tests.e2e.harness import demo_pod_args

CASES = [
    # verb, service method that fails, what the answer carries
    ("filter", "filter", "Error"),
    ("prioritize", "prioritize", None),
    ("bind", "bind", "Error"),
]


@pytest.mark.parametrize(("verb", "method", "error_field"), CASES, ids=[c[0] for c in CASES])
async def test_an_exception_is_answered_logged_and_counted(demo_service, caplog, verb: str, method: str, error_field: str | None) -> None:
    demo = await demo_service()
    service = demo.service

    def boom(*_args: object, **_kw: object) -> None:
        raise RuntimeError("injected failure")

    setattr(service, method, boom)
    body = (
        demo_pod_args("trainer", ["node-a"])
        if verb != "bind"
        else {"PodName": "trainer", "PodNamespace": "default", "PodUID": "", "Node": "node-a"}
    )
    before = service.metrics.registry.get_sample_value("dra_extender_requests_total", {"verb": verb, "result": "error"}) or 0
    transport = httpx.ASGITransport(app=create_app(service))
    with caplog.at_level(logging.ERROR):
        async with httpx.AsyncClient(transport=transport, base_url="http://extender") as client:
            response = await client.post(f"/{verb}", content=orjson.dumps(body))
    assert response.status_code == 200
    if error_field is not None:
        assert "internal error in dra-extender" in response.json()[error_field] and "injected failure" in response.text
    else:
        assert response.json() == []  # HostPriorityList has no error field: no opinion
    assert any("internal error" in r.getMessage() and r.levelno == logging.ERROR for r in caplog.records)
    after = service.metrics.registry.get_sample_value("dra_extender_requests_total", {"verb": verb, "result": "error"})
    assert after == before + 1
