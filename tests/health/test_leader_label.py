"""The leader labels its own pod, so that the alerts Service selects it alone; a follower removes the label."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from pathlib import Path

import pytest

from controllers.health.leader_label import LABEL, LeaderLabel
from kubesim.clock import FakeClock
from kubesim.fakeapi import FakeApiServer
from kubesim.lease import FakeLease
from kubesim.objects import pod
from tracker.apiserver.source import ApiSource
from tracker.leadership_gate import LeadershipGate

NAMESPACE = "dra-system"


def labels(api: FakeApiServer, name: str) -> dict[str, str]:
    obj = api.get("pods", NAMESPACE, name)
    assert obj is not None
    return obj["metadata"].get("labels") or {}


async def settle(api: FakeApiServer, label: LeaderLabel, want: bool) -> None:
    """The label task has written what leadership says (state, not time: at most a few loop turns)."""
    for _ in range(500):
        if label.labelled == want:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"labelled={label.labelled}, want {want}")


async def test_the_leader_labels_its_pod_and_removes_the_label_when_it_stops_leading(tmp_path: Path) -> None:
    async with FakeApiServer() as api:
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
        api.create(
            pod("ext-a", NAMESPACE, labels={"app": "dra-extender", LABEL: "true"})
        )  # a stale label: this container restarted as a follower
        api.create(pod("ext-b", NAMESPACE, labels={"app": "dra-extender"}))
        leader = {"ext-a": FakeLease(held=False), "ext-b": FakeLease()}
        clock = FakeClock()
        source = ApiSource(kubeconfig=str(kubeconfig))
        a = LeaderLabel(source, NAMESPACE, "ext-a", LeadershipGate(leader["ext-a"]), clock=clock)
        b = LeaderLabel(source, NAMESPACE, "ext-b", LeadershipGate(leader["ext-b"]), clock=clock)
        tasks = [asyncio.create_task(a.run()), asyncio.create_task(b.run())]
        try:
            await settle(api, a, False)
            await settle(api, b, True)
            assert LABEL not in labels(api, "ext-a")  # the stale label is gone at startup
            assert labels(api, "ext-b")[LABEL] == "true"
            assert labels(api, "ext-b")["app"] == "dra-extender"  # the pod's other labels are kept

            leader["ext-a"].held, leader["ext-b"].held = True, False  # hand-over
            clock.advance(1.0)
            await settle(api, a, True)
            await settle(api, b, False)
            assert labels(api, "ext-a")[LABEL] == "true"
            assert LABEL not in labels(api, "ext-b")

            api.set_faults(error_rate=1.0, error_status=500, verbs=("patch",), paths=("pods",))
            leader["ext-a"].held = False  # loses the lease while the API server refuses: retried at each poll
            clock.advance(1.0)
            for _ in range(500):  # until the refused patch is answered
                if any(r.fault for r in api.requests_for(verb="patch", resource="pods")):
                    break
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.01)
            assert any(r.fault for r in api.requests_for(verb="patch", resource="pods"))
            assert a.labelled is True and labels(api, "ext-a")[LABEL] == "true"
            api.clear_faults()
            clock.advance(1.0)
            await settle(api, a, False)
            assert LABEL not in labels(api, "ext-a")

            leader["ext-b"].held = True
            clock.advance(1.0)
            await settle(api, b, True)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        assert LABEL not in labels(api, "ext-b")  # a leader that stops removes its label


@dataclass(frozen=True)
class RefusalRow:
    name: str
    read_only: bool  # the source is --read-only (else the API server refuses every pod patch with a 500)
    patches: int  # pod patches the API server sees over POLLS polls
    warnings: int  # "could not set" warnings logged over them
    said_once: int  # "not written" lines logged
    stops: bool  # the task ends by itself


POLLS = 30
REFUSALS = [
    RefusalRow("read-only: refused once, said once, never retried", True, 0, 0, 1, True),
    RefusalRow("the API server refusing: retried at every poll", False, POLLS + 2, POLLS + 2, 0, False),  # the first, then one a poll
]


@pytest.mark.parametrize("row", REFUSALS, ids=[r.name for r in REFUSALS])
async def test_a_refusal_of_read_only_is_decided_once(tmp_path: Path, caplog: pytest.LogCaptureFixture, row: RefusalRow) -> None:
    """`controllers --read-only --alerts-listen`: the label write is refused by the process itself, so it is not
    retried (nor logged) every second; a refusal by the API server still is, at each poll."""
    caplog.set_level(logging.INFO, logger="dra_extender.health")
    async with FakeApiServer() as api:
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
        api.create(pod("ext-a", NAMESPACE, labels={"app": "dra-extender", LABEL: "true"}))
        if not row.read_only:
            api.set_faults(error_rate=1.0, error_status=500, verbs=("patch",), paths=("pods",))
        clock = FakeClock()
        source = ApiSource(kubeconfig=str(kubeconfig), read_only=row.read_only)
        label = LeaderLabel(source, NAMESPACE, "ext-a", LeadershipGate(None, read_only=row.read_only), clock=clock)
        task = asyncio.create_task(label.run())
        try:
            for _ in range(POLLS + 1):  # each turn: the task is parked on the clock (or done), then a poll passes
                for _ in range(500):
                    if task.done() or clock.next_deadline() is not None:
                        break
                    await asyncio.sleep(0.01)
                clock.advance(label.poll)
            await asyncio.sleep(0.05)
            assert task.done() is row.stops
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await source.close()
    messages = [r.getMessage() for r in caplog.records]
    assert len(api.requests_for(verb="patch", resource="pods")) == row.patches
    assert sum("could not set the health leader label" in m for m in messages) == row.warnings, messages
    assert sum("health leader label is not written" in m for m in messages) == row.said_once, messages
