"""The eviction controller and the health controller together, on one fake clock, against the fake API server.

Extends tests/eviction/harness.py: the same production path (ApiSource
reflectors into a ClusterState, writes over HTTP), plus a HealthController
whose alert deliveries a test makes through the receiver's ASGI app.
Settled means both controllers wait on the clock with nothing under way.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson

from allocator.cel import CelEnvironment
from controllers.eviction import EvictionController, Ownership, Settings
from controllers.health.controller import HealthController
from controllers.health.policy import GROUP
from controllers.health.receiver import Receiver
from kubesim import objects
from kubesim.fakeapi import FakeApiServer
from serving.http_thread import Limits
from serving.metrics import Metrics
from tests.eviction.harness import DRIVER, Cluster, CountedWrites
from tracker.apiserver.source import ApiSource
from tracker.leadership_gate import LeadershipGate
from tracker.state import ClusterState

TOKEN = "s3cret-token"


class HealthCluster(Cluster):
    def __init__(self, api: FakeApiServer, tmp_path: Path) -> None:
        super().__init__(api, tmp_path)
        self.health: HealthController | None = None
        self.token_file = tmp_path / "token"
        self.token_file.write_text(TOKEN + "\n")
        self.receiver: Receiver | None = None
        self.metrics = Metrics()
        self.standby: tuple[HealthController, CountedWrites] | None = None

    async def start(self, *, mode: str = "delete", evict_upstream: bool = False, health: bool = True) -> EvictionController:  # type: ignore[override]
        self.state = ClusterState(CelEnvironment())
        source = ApiSource(kubeconfig=str(self.kubeconfig))
        self.writes = CountedWrites(source)
        settings = Settings(mode=mode, ownership=Ownership(evict_upstream=evict_upstream), debounce=0.005)  # type: ignore[arg-type]
        self.metrics = Metrics()
        self.controller = EvictionController(
            self.state, self.writes, settings, leadership=LeadershipGate(self.lease), clock=self.clock, metrics=self.metrics
        )
        self.health = HealthController(
            self.state,
            self.writes,
            feed=source,
            leadership=LeadershipGate(self.lease),
            clock=self.clock,
            metrics=self.metrics,  # type: ignore[arg-type]
        )
        self.receiver = Receiver(self.health, self.token_file, Limits(max_body_bytes=10 * 1024 * 1024), metrics=self.metrics)
        self.tasks = [
            asyncio.create_task(source.run(self.state)),
            asyncio.create_task(self.controller.run()),
            asyncio.create_task(self.health.run()),
        ]
        for _ in range(500):
            if self.state.ready and self.health.ready:
                break
            await asyncio.sleep(0.01)
        assert self.state.ready and self.health.ready
        await self.settle()
        return self.controller

    async def start_standby(self) -> Receiver:
        """A second replica (its own tracker and controller) that leads while the first does not; its receiver."""
        state = ClusterState(CelEnvironment())
        source = ApiSource(kubeconfig=str(self.kubeconfig))
        writes = CountedWrites(source)
        ctrl = HealthController(
            state, writes, feed=source, leadership=LeadershipGate(self.standby_lease), clock=self.clock, metrics=Metrics()
        )  # type: ignore[arg-type]
        self.standby = (ctrl, writes)
        self.tasks += [asyncio.create_task(source.run(state)), asyncio.create_task(ctrl.run())]
        for _ in range(500):
            if ctrl.ready:
                break
            await asyncio.sleep(0.01)
        assert ctrl.ready
        await self.settle()
        return Receiver(ctrl, self.token_file, Limits(max_body_bytes=10 * 1024 * 1024))

    def _settled(self) -> bool:
        if self.standby is not None:
            ctrl, writes = self.standby
            if not ctrl.idle or ctrl.wake.is_set() or ctrl.lock.locked() or writes.under_way:
                return False
        h = self.health
        if h is None or not h.idle or h.wake.is_set() or h.lock.locked():
            return False
        if not self._policies_caught_up():
            return False
        return super()._settled()

    def _policies_caught_up(self) -> bool:
        assert self.health is not None
        want = {o["metadata"]["name"]: o["metadata"]["resourceVersion"] for o in self.api.list("devicehealthpolicies", group=GROUP)}
        have = {n: o["metadata"]["resourceVersion"] for n, o in self.health.policies.objects.items()}
        return want == have

    async def post(
        self, body: Any, *, token: str | None = TOKEN, raw: bytes | None = None, to: Receiver | None = None
    ) -> tuple[int, dict[str, Any]]:
        """One webhook delivery through a receiver's ASGI app (default: the first replica's); (status, JSON answer)."""
        receiver = to or self.receiver
        assert receiver is not None
        data = raw if raw is not None else orjson.dumps(body)
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
        if token is not None:
            headers.append((b"authorization", f"Bearer {token}".encode()))
        status, answer = await asgi_post(receiver.app, "/alerts", headers, data)
        await self.settle()
        return status, answer


async def asgi_post(app: Any, path: str, headers: list[tuple[bytes, bytes]], body: bytes) -> tuple[int, dict[str, Any]]:
    """A POST straight into an ASGI app (no httpx in the image): status and the JSON (or text) answer."""
    sent = False
    out: dict[str, Any] = {"status": 0, "body": b""}

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.sleep(3600)
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            out["status"] = message["status"]
        elif message["type"] == "http.response.body":
            out["body"] += message.get("body", b"")

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
    }
    await app(scope, receive, send)
    try:
        answer = orjson.loads(out["body"])
    except orjson.JSONDecodeError:
        answer = {"text": out["body"].decode()}
    return out["status"], answer


# ---------------------------------------------------------------------- objects


def uuid_slice(devices: int, *, node_name: str = "node-a") -> dict[str, Any]:
    """gpu-<i> with attributes uuid GPU-<node>-<i> and index <i>."""
    return objects.uuid_slice(node_name, DRIVER, devices, index=True)


def xid_rule(**over: Any) -> dict[str, Any]:
    rule: dict[str, Any] = {
        "name": "xid-79",
        "signal": {"alert": {"matchLabels": {"alertname": "GPUXid", "xid": "79"}}},
        "match": {"nodeLabel": "Hostname", "attribute": "uuid", "attributeLabel": "UUID"},
        "devices": {"driver": DRIVER},
        "taint": {"key": "health.example.com/xid", "value": "79"},
        "steps": [{"effect": "NoSchedule"}, {"effect": "NoExecute", "after": "5m", "occurrences": 3, "within": "1h"}],
        "clearAfter": "15m",
    }
    rule.update(over)
    return rule


def policy(name: str = "gpu-health", *rules: dict[str, Any], mode: str = "Enforce") -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/v1alpha1",
        "kind": "DeviceHealthPolicy",
        "metadata": {"name": name},
        "spec": {"mode": mode, "rules": list(rules) or [xid_rule()]},
    }


def alert(uuid: str, *, node: str = "node-a", status: str = "firing", fingerprint: str | None = None, xid: str = "79") -> dict[str, Any]:
    return {
        "status": status,
        "labels": {"alertname": "GPUXid", "xid": xid, "Hostname": node, "UUID": uuid},
        "annotations": {"summary": f"XID {xid} on {uuid}"},
        "startsAt": "2026-01-01T00:00:00Z",
        "endsAt": "0001-01-01T00:00:00Z" if status == "firing" else "2026-01-01T01:00:00Z",
        "generatorURL": "http://prometheus/graph",
        "fingerprint": fingerprint or f"fp-{uuid}-{xid}",
    }


def delivery(*alerts: dict[str, Any]) -> dict[str, Any]:
    """Alertmanager's webhook_config payload (version 4)."""
    firing = any(a["status"] == "firing" for a in alerts)
    return {
        "version": "4",
        "groupKey": '{}:{alertname="GPUXid"}',
        "truncatedAlerts": 0,
        "status": "firing" if firing else "resolved",
        "receiver": "dra-extender",
        "groupLabels": {"alertname": "GPUXid"},
        "commonLabels": {"alertname": "GPUXid"},
        "commonAnnotations": {},
        "externalURL": "http://alertmanager:9093",
        "alerts": list(alerts),
    }
