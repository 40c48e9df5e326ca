"""Concurrent /bind against the fake API server: one device never goes to two claims.

- 1,000 pods, each with its own one-device claim, race for 100 devices through
  many concurrent /filter + /bind requests to one extender (as schedulers
  whose caches raced would send them); the claims read back from the server
  hold each device at most once, every success is a bound pod with its claim
  allocated and reserved, every failure a readable Error.
- Two extenders following the scheduler's Lease (HA): only the holder's
  sidecar allocates, the other answers "not leader"; the Lease is handed over
  twice while both receive binds, and still no device is allocated twice.
"""

from __future__ import annotations

import asyncio
import random
import re
import time
import uuid
from collections import Counter, defaultdict
from typing import Any

import httpx

from kubesim.objects import PAUSE, claim, device_class, gpu_slice, node, pod
from tests.e2e.cluster import FakeApi, cluster_extender, collection, wait_converged, wait_for
from tests.e2e.harness import Extender
from tracker.timestamps import rfc3339

DRIVER = "gpu.example.com"
NAMESPACE = "default"
LEASE_NS, LEASE_NAME = "kube-system", "kube-scheduler"
POLL_INTERVAL = 2.0  # tracker.apiserver.leadership.RETRY_PERIOD: how often a follower re-reads the Lease


# ---------------------------------------------------------------------- objects


def gpu_claim(i: int) -> dict[str, Any]:
    return claim(f"claim-{i:04d}", NAMESPACE, device_class=DRIVER, count=1)


def gpu_pod(i: int) -> dict[str, Any]:
    return pod(f"pod-{i:04d}", NAMESPACE, claims={"gpu": f"claim-{i:04d}"}, scheduler="dra-scheduler", image=PAUSE)


async def create_all(api: FakeApi, objects: list[dict[str, Any]], parallel: int = 32) -> list[dict[str, Any]]:
    """POST every object through the REST API, `parallel` at a time; returns what the server stored."""
    sem = asyncio.Semaphore(parallel)
    async with httpx.AsyncClient(base_url=api.url, timeout=30) as http:

        async def one(obj: dict[str, Any]) -> dict[str, Any]:
            async with sem:
                ns = (obj.get("metadata") or {}).get("namespace")
                group = obj["apiVersion"].rpartition("/")[0] if "/" in obj["apiVersion"] else None
                r = await http.post(collection(obj["kind"], ns, group), json=obj)
                assert r.status_code == 201, r.text
                return r.json()

        return await asyncio.gather(*(one(o) for o in objects))


def now_micro() -> str:
    return rfc3339(micro=True)


# ---------------------------------------------------------------------- readback checks


def check_claims(api: FakeApi, node_of_device: dict[tuple[str, str], str]) -> dict[str, Any]:
    """Read every claim and pod back and check the allocation invariants; returns what was found."""
    claims = api.list("ResourceClaim")
    pods = {p["metadata"]["name"]: p for p in api.list("Pod")}
    holders: dict[tuple[str, str], list[str]] = defaultdict(list)
    allocated: dict[str, dict[str, Any]] = {}
    for c in claims:
        name = c["metadata"]["name"]
        status = c.get("status") or {}
        allocation = status.get("allocation")
        reserved = status.get("reservedFor") or []
        if allocation is None:
            assert not reserved, f"claim {name} is reserved but not allocated: {reserved}"
            continue
        allocated[name] = c
        results = allocation["devices"]["results"]
        assert len(results) == 1, f"claim {name}: {results}"
        for r in results:
            assert r["driver"] == DRIVER and r["request"] == "gpu", r
            holders[(r["pool"], r["device"])].append(name)
        assert "resource.kubernetes.io/delete-protection" in (c["metadata"].get("finalizers") or []), name
        # Reserved for exactly the pod of the same number, bound to a node that reaches the device.
        assert len(reserved) == 1, f"claim {name} reservedFor {reserved}"
        pod_name = reserved[0]["name"]
        assert reserved[0]["resource"] == "pods" and pod_name == "pod-" + name.split("-")[1], (name, reserved)
        p = pods[pod_name]
        assert reserved[0]["uid"] == p["metadata"]["uid"], (name, reserved, p["metadata"]["uid"])
        bound_to = (p.get("spec") or {}).get("nodeName")
        device = (results[0]["pool"], results[0]["device"])
        assert bound_to == node_of_device[device], (
            f"claim {name} holds {device} of {node_of_device[device]} but {pod_name} is on {bound_to!r}"
        )
        terms = allocation["nodeSelector"]["nodeSelectorTerms"]
        assert terms == [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [bound_to]}]}], terms
    doubles = {f"{pool}/{dev}": names for (pool, dev), names in holders.items() if len(names) > 1}
    assert not doubles, f"devices allocated to more than one claim: {doubles}"
    bound = {n for n, p in pods.items() if (p.get("spec") or {}).get("nodeName")}
    return {"allocated": allocated, "bound": bound, "devices": set(holders), "pods": pods}


def assert_clean_logs(*extenders: Extender) -> None:
    for ext in extenders:
        logs = ext.logs()
        assert "Traceback" not in logs and "internal error" not in logs, logs[-5000:]
        assert "allocated to two claims" not in logs, re.findall(r".*allocated to two claims.*", logs)[:5]


# ---------------------------------------------------------------------- 1,000 pods, 100 devices, one extender

PODS = 1000
NODES = 10
GPUS = 10
IN_FLIGHT = 48


async def test_thousand_pods_race_for_hundred_devices() -> None:
    api = FakeApi()
    ext: Extender | None = None
    try:
        nodes = [f"node-{n:02d}" for n in range(NODES)]
        await create_all(
            api, [device_class(DRIVER, DRIVER), *map(node, nodes), *(gpu_slice(n, GPUS, driver=DRIVER, index=True) for n in nodes)]
        )
        node_of_device = {(n, f"gpu-{j}"): n for n in nodes for j in range(GPUS)}
        ext = cluster_extender(api)
        ext.wait_ready()
        # Claims and pods arrive through the extender's watches while it serves.
        t0 = time.perf_counter()
        stored = await create_all(api, [o for i in range(PODS) for o in (gpu_claim(i), gpu_pod(i))])
        created_s = time.perf_counter() - t0
        wait_converged(api, ext, timeout=30)
        uids = {o["metadata"]["name"]: o["metadata"]["uid"] for o in stored if o["kind"] == "Pod"}

        rng = random.Random(1234)
        order = list(range(PODS))
        rng.shuffle(order)
        results: dict[str, tuple[int, str, str]] = {}  # pod -> (HTTP status, Error, node)
        filtered: Counter[str] = Counter()
        sem = asyncio.Semaphore(IN_FLIGHT)
        async with httpx.AsyncClient(base_url=ext.url, timeout=60, limits=httpx.Limits(max_connections=IN_FLIGHT)) as http:

            async def schedule(i: int) -> None:
                name = f"pod-{i:04d}"
                # A scheduler whose cache raced: it may pick a node the filter just rejected.
                target = nodes[i % NODES]
                async with sem:
                    body = {
                        "Pod": {**gpu_pod(i), "metadata": {**gpu_pod(i)["metadata"], "uid": uids[name]}},
                        "Nodes": None,
                        "NodeNames": nodes,
                    }
                    f = await http.post("/filter", json=body)
                    assert f.status_code == 200, f.text
                    answer = f.json()
                    passed = answer["NodeNames"] or []
                    assert set(passed) | set(answer["FailedAndUnresolvableNodes"] or {}) == set(nodes), answer
                    filtered["fits" if target in passed else "rejected"] += 1
                    r = await http.post("/bind", json={"PodName": name, "PodNamespace": NAMESPACE, "PodUID": uids[name], "Node": target})
                    results[name] = (r.status_code, r.json().get("Error"), target)

            t1 = time.perf_counter()
            await asyncio.gather(*(schedule(i) for i in order))
            bind_s = time.perf_counter() - t1

            ok = {n for n, (status, error, _) in results.items() if status == 200 and error == ""}
            # The scheduler retries a bind whose answer it did not get (httpTimeout): the pod is
            # already bound, the answer is an error, and the claim keeps its reservation.
            retried = sorted(ok)[:10]
            for name in retried:
                r = await http.post(
                    "/bind", json={"PodName": name, "PodNamespace": NAMESPACE, "PodUID": uids[name], "Node": results[name][2]}
                )
                assert r.status_code == 200 and "already assigned" in r.json()["Error"], (name, r.text)

        print(
            f"\n{PODS} pods / {NODES * GPUS} devices: created in {created_s:.1f}s; filter+bind of all pods "
            f"in {bind_s:.1f}s ({PODS / bind_s:.0f} pods/s, {IN_FLIGHT} in flight); filter said {dict(filtered)}"
        )

        assert len(results) == PODS
        for name, (status, error, target) in results.items():
            assert status == 200, (name, status, error)
            assert isinstance(error, str), (name, error)
            if name in ok:
                continue
            # A readable refusal naming the pod and the node, and why.
            assert error.startswith(f"cannot bind pod {NAMESPACE}/{name} to {target}: "), (name, error)
            assert f"claim {NAMESPACE}/claim-{name[4:]}" in error and "devices available" in error, (name, error)
        assert len(ok) == NODES * GPUS, f"{len(ok)} binds succeeded"

        found = check_claims(api, node_of_device)
        assert len(found["allocated"]) == NODES * GPUS
        assert found["devices"] == set(node_of_device), "not every device was used"
        assert found["bound"] == ok, (sorted(found["bound"] - ok)[:5], sorted(ok - found["bound"])[:5])
        for name in ok:
            c = found["allocated"].get("claim-" + name[4:])
            assert c is not None, f"{name} was bound but its claim is not allocated"
            assert found["pods"][name]["spec"]["nodeName"] == results[name][2]
        wait_converged(api, ext, timeout=30)
        assert_clean_logs(ext)
    finally:
        if ext is not None:
            ext.stop()
        api.stop()


# ---------------------------------------------------------------------- two extenders, one Lease


def leading(ext: Extender) -> bool:
    return 'dra_extender_leader{role="verbs"} 1.0' in ext.http.get("/metrics").text


def scheduler_lease(holder: str) -> dict[str, Any]:
    """kube-scheduler's Lease as its leader election writes it (no acquireTime: acquired long ago)."""
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": LEASE_NAME, "namespace": LEASE_NS},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15, "renewTime": now_micro(), "leaseTransitions": 0},
    }


async def retry_left_over(api: FakeApi, leader: Extender, uids: dict[str, str]) -> list[str]:
    """kube-scheduler's retry of each pod whose claim is reserved for it but which is not bound; returns the pods.

    The retry goes to the node the claim is allocated for, as kube-scheduler's filters (and /filter) then leave no other.
    """
    pods = {p["metadata"]["name"]: p for p in api.list("Pod")}
    left: dict[str, str] = {}  # pod -> the node its claim is allocated for
    for c in api.list("ResourceClaim"):
        status = c.get("status") or {}
        for ref in status.get("reservedFor") or []:
            if not (pods[ref["name"]].get("spec") or {}).get("nodeName"):
                (term,) = status["allocation"]["nodeSelector"]["nodeSelectorTerms"]
                left[ref["name"]] = term["matchFields"][0]["values"][0]
    async with httpx.AsyncClient(base_url=leader.url, timeout=30) as http:
        for name, node_name in sorted(left.items()):
            args = {"PodName": name, "PodNamespace": NAMESPACE, "PodUID": uids[name], "Node": node_name}
            r = await http.post("/bind", json=args)
            assert r.status_code == 200 and r.json()["Error"] == "", (name, r.text)
    return sorted(left)


HA_NODES = 4  # few nodes: concurrent binds compete for the same pools
HA_GPUS = 40
HA_PODS = 400
SLACK = 1.5  # scheduling delay on 2 busy cores


async def test_two_extenders_follow_the_scheduler_lease_through_handovers() -> None:
    nodes = [f"node-{n}" for n in range(HA_NODES)]
    api = FakeApi()
    exts: dict[str, Extender] = {}
    try:
        await create_all(
            api, [device_class(DRIVER, DRIVER), *map(node, nodes), *(gpu_slice(n, HA_GPUS, driver=DRIVER, index=True) for n in nodes)]
        )
        node_of_device = {(n, f"gpu-{j}"): n for n in nodes for j in range(HA_GPUS)}
        stored = await create_all(api, [o for i in range(HA_PODS) for o in (gpu_claim(i), gpu_pod(i))])
        uids = {o["metadata"]["name"]: o["metadata"]["uid"] for o in stored if o["kind"] == "Pod"}
        api.create(scheduler_lease(f"host-a_{uuid.uuid4()}"))
        for who in ("a", "b"):
            exts[who] = cluster_extender(api, "--follow-scheduler-lease", f"{LEASE_NS}/{LEASE_NAME}", env={"HOSTNAME": f"host-{who}"})
        for ext in exts.values():
            ext.wait_ready()
        wait_for(lambda: leading(exts["a"]), timeout=10, what="A leads")
        assert not leading(exts["b"])

        # (extender, pod, request start, request end, Error). Every pod goes to both extenders, as
        # two schedulers that both believe they lead would send it, crossed in pairs on one node:
        # A gets pod 2j while B gets pod 2j+1, then the other way round. While both allocate,
        # they would pick the same free device for different claims.
        answers: list[tuple[str, str, float, float, str]] = []
        pairs = iter(range(HA_PODS // 2))

        async def lane(http: dict[str, httpx.AsyncClient], until: float) -> None:
            async def one(who: str, i: int) -> None:
                name = f"pod-{i:04d}"
                args = {"PodName": name, "PodNamespace": NAMESPACE, "PodUID": uids[name], "Node": nodes[(i // 8) % HA_NODES]}
                start = time.monotonic()
                r = await http[who].post("/bind", json=args)
                assert r.status_code == 200, r.text
                answers.append((who, name, start, time.monotonic(), r.json()["Error"]))

            for j in pairs:
                await asyncio.gather(one("a", 2 * j), one("b", 2 * j + 1))
                await asyncio.gather(one("a", 2 * j + 1), one("b", 2 * j))
                if time.monotonic() > until:
                    return
                await asyncio.sleep(0.5)

        async def binds_for(seconds: float, lanes: int = 2) -> None:
            clients = {w: httpx.AsyncClient(base_url=e.url, timeout=30) for w, e in exts.items()}
            try:
                until = time.monotonic() + seconds
                await asyncio.gather(*(lane(clients, until) for _ in range(lanes)))
            finally:
                for c in clients.values():
                    await c.aclose()

        def hand_over(to: str) -> float:
            """What kube-scheduler's leader election writes when another replica takes the Lease."""

            def change(obj: dict[str, Any]) -> None:
                spec = obj["spec"]
                spec["holderIdentity"] = f"host-{to}_{uuid.uuid4()}"
                spec["acquireTime"] = spec["renewTime"] = now_micro()
                spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1

            api.mutate("Lease", LEASE_NS, LEASE_NAME, change)
            return time.monotonic()

        t_start = time.monotonic()
        await binds_for(2.5)
        t_b = hand_over("b")
        await binds_for(10.0)
        t_a = hand_over("a")
        await binds_for(10.0)
        t_end = time.monotonic()

        ok = [(who, name, start, end) for who, name, start, end, error in answers if error == ""]
        kinds = Counter(re.sub(r" [a-z-]+/.*", "", e) or "ok" for *_, e in answers)
        print(
            f"\nHA: {len(answers)} bind answers {dict(kinds)}; allocations by A/B: "
            f"{Counter(w for w, *_ in ok)}; hand-overs at +{t_b - t_start:.1f}s, +{t_a - t_start:.1f}s"
        )
        # A bind that wrote its claims and then lost the Lease before the Binding leaves them to
        # the new leader (extender/bind/undo.py): kube-scheduler retries the pod, the leader binds
        # it to the node its claim is allocated for. Modelled here as that retry, sent to A.
        wait_converged(api, exts["a"], timeout=30)
        retried = await retry_left_over(api, exts["a"], uids)
        print(f"HA: retried {len(retried)} pods whose claims an ex-leader left allocated: {retried}")
        # The claims as the server holds them: no device twice, every success a bound pod.
        found = check_claims(api, node_of_device)
        ok_pods = [name for _, name, _, _ in ok] + retried
        assert len(ok_pods) == len(set(ok_pods)), "a pod was bound twice"
        assert found["bound"] == set(ok_pods), (sorted(found["bound"] - set(ok_pods))[:5], sorted(set(ok_pods) - found["bound"])[:5])
        assert len(found["allocated"]) == len(ok_pods)
        for *_, error in answers:
            assert error in ("", "not leader") or error.startswith(("cannot bind pod ", "binding pod ")), error
        # Each window: (who may allocate, from, to). The old holder stops within its poll interval.
        for who, other, begin, end in (("a", "b", t_start, t_b), ("b", "a", t_b, t_a), ("a", "b", t_a, t_end)):
            stale = [e for e in ok if e[0] == other and begin + POLL_INTERVAL + SLACK < e[2] and e[3] < end]
            assert not stale, f"{other} allocated while {who} held the lease: {stale[:3]}"
            assert [e for e in ok if e[0] == who and begin < e[2] and e[3] < end], f"{who} never allocated while holding the lease"
        # One allocator at a time: around each hand-over, the new holder's first successful bind
        # starts after the old holder's last one ended (no window where both allocate).
        for t_h, old, new, end in ((t_b, "a", "b", t_a), (t_a, "b", "a", t_end)):
            old_last = max(e[3] for e in ok if e[0] == old and e[2] < t_h + POLL_INTERVAL + SLACK)
            new_first = min(e[2] for e in ok if e[0] == new and t_h < e[2] < end)
            assert old_last < new_first, f"{old} allocated until +{old_last - t_h:.2f}s, {new} from +{new_first - t_h:.2f}s"
        before = [e for e in answers if e[0] == "b" and e[3] < t_b]
        assert before and all(e[4] == "not leader" for e in before), {e[4] for e in before}

        for ext in exts.values():
            wait_converged(api, ext, timeout=30)
        assert_clean_logs(*exts.values())
    finally:
        for ext in exts.values():
            ext.stop()
        api.stop()
