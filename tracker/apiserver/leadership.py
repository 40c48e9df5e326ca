"""Who may allocate at /bind and run the eviction controller.

Two modes (docs/design.md#leadership):
- follow: lead exactly while the co-located kube-scheduler holds its Lease
  (`holderIdentity` starts with this pod's hostname + "_", kube-scheduler's
  identity format) and the lease has not expired, so the sidecar leads
  together with its own scheduler;
- elect: take our own Lease (`dra-extender` in the pod's namespace) with the
  acquire/renew/release protocol of client-go's leaderelection: leadership
  counts from before the renewal was sent, a candidate waits a whole lease
  duration from when it last saw the Lease change (never comparing the
  holder's renewTime with its own clock), and a stopping leader releases it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson

from tracker.apiserver.discovery import Transport
from tracker.resources import LEASES
from tracker.timestamps import parse_rfc3339, rfc3339

log = logging.getLogger("dra_extender.leadership")

LEASE_DURATION = 15.0
RETRY_PERIOD = 2.0
# Follow mode, one-allocator rule across a hand-over (docs/design.md#never-double-allocate-a-device): a follower
# learns of a hand-over only at its next poll, so the old holder's sidecar may
# keep allocating for up to one poll interval. Each positive observation is
# therefore trusted for FOLLOW_VALIDITY_POLLS poll intervals from the moment it
# was asked (so a sidecar whose polls stall stops by itself), and a sidecar
# whose scheduler just took the Lease from another holder starts allocating
# only after that window plus TAKEOVER_MARGIN (writes in flight, watch delivery).
FOLLOW_VALIDITY_POLLS = 2.0
TAKEOVER_MARGIN = 1.0
ON_DEMAND_INTERVAL = 0.25  # seconds: the least time between Lease reads asked for by binds (poll_if_missing)


def _now() -> datetime:
    return datetime.now(UTC)


def pod_namespace() -> str:
    env = os.environ.get("POD_NAMESPACE")
    if env:
        return env
    try:
        with open("/var/run/secrets/kubernetes.io/serviceaccount/namespace") as f:
            return f.read().strip() or "default"
    except OSError:
        return "default"


# kube-scheduler's defaults for leaderElection (k8s.io/kube-scheduler config v1).
SCHEDULER_LEASE_DEFAULTS = ("kube-system", "kube-scheduler")


class SchedulerConfigError(ValueError):
    """The KubeSchedulerConfiguration given to --scheduler-config cannot be read."""


def load_scheduler_config(path: str) -> dict[str, Any]:
    """The KubeSchedulerConfiguration in `path`, as a mapping; SchedulerConfigError (one line) when it cannot be read."""
    import yaml

    try:
        config = yaml.safe_load(Path(path).read_text())
    except OSError as e:
        raise SchedulerConfigError(f"--scheduler-config {path}: {e.strerror or e}") from None
    except yaml.YAMLError as e:
        raise SchedulerConfigError(f"--scheduler-config {path}: not valid YAML ({getattr(e, 'problem', None) or e})") from None
    if not isinstance(config, dict) or config.get("kind") != "KubeSchedulerConfiguration":
        raise SchedulerConfigError(
            f"--scheduler-config {path}: not a KubeSchedulerConfiguration (kind: {config.get('kind') if isinstance(config, dict) else None!r})"
        )
    return config


def lease_from_scheduler_config(path: str) -> tuple[str, str] | None:
    """The Lease a kube-scheduler with this configuration takes (its defaults filled in); None if it does not elect.

    One source of truth: the sidecar reads the very file its scheduler reads,
    so the two can never name different Leases.
    """
    config = load_scheduler_config(path)
    election = config.get("leaderElection") or {}
    if not isinstance(election, dict):
        raise SchedulerConfigError(f"--scheduler-config {path}: leaderElection must be a mapping")
    if election.get("leaderElect") is False:
        return None
    if (election.get("resourceLock") or "leases") != "leases":
        raise SchedulerConfigError(
            f"--scheduler-config {path}: leaderElection.resourceLock {election['resourceLock']!r}; only leases can be followed"
        )
    return (
        str(election.get("resourceNamespace") or SCHEDULER_LEASE_DEFAULTS[0]),
        str(election.get("resourceName") or SCHEDULER_LEASE_DEFAULTS[1]),
    )


IN_TREE_ALLOCATOR = "DynamicResources"


def _named(entries: Any) -> set[str]:
    return {str(e.get("name")) for e in entries or [] if isinstance(e, dict)}


def keeps_in_tree_allocator(profile: dict[str, Any]) -> bool:
    """Whether kube-scheduler would run DynamicResources in this profile (k8s.io/kube-scheduler v1's plugin merge).

    1.36's defaults enable it under multiPoint; `multiPoint.disabled` (by name
    or "*") removes it there, and any `enabled` list (multiPoint or one
    extension point) brings it back. Disabling it at single extension points
    only is counted as on: it still runs at the others.
    """
    plugins = profile.get("plugins") or {}
    if not isinstance(plugins, dict):
        return True
    multi = plugins.get("multiPoint") or {}
    disabled = _named(multi.get("disabled")) if isinstance(multi, dict) else set()
    if not disabled & {IN_TREE_ALLOCATOR, "*"}:
        return True
    return any(isinstance(point, dict) and IN_TREE_ALLOCATOR in _named(point.get("enabled")) for point in plugins.values())


def refuse_in_tree_allocator(path: str) -> None:
    """SchedulerConfigError when a profile of this kube-scheduler keeps DynamicResources on.

    The extenders of a KubeSchedulerConfiguration serve every profile, so
    every profile must leave allocation to the extender: two allocators
    would manage the same devices (one allocator per device pool). A file
    without profiles gets kube-scheduler's default profile, which has it on.
    """
    config = load_scheduler_config(path)
    profiles = config.get("profiles") or [{"schedulerName": "default-scheduler"}]
    if not isinstance(profiles, list):
        raise SchedulerConfigError(f"--scheduler-config {path}: profiles must be a list")
    on = [str(p.get("schedulerName") or "default-scheduler") for p in profiles if not isinstance(p, dict) or keeps_in_tree_allocator(p)]
    if on:
        raise SchedulerConfigError(
            f"--scheduler-config {path}: profile {', '.join(on)} keeps the in-tree {IN_TREE_ALLOCATOR} plugin on, so two "
            f"allocators would manage the same devices; add {{name: {IN_TREE_ALLOCATOR}}} to plugins.multiPoint.disabled "
            "of every profile (the extender serves them all)"
        )


def _renewed(spec: dict[str, Any]) -> datetime | None:
    """When the Lease was last renewed (else acquired); None if it says neither as an RFC 3339 time."""
    return parse_rfc3339(spec.get("renewTime")) or parse_rfc3339(spec.get("acquireTime"))


def _expired_for(spec: dict[str, Any], now: datetime) -> float:
    """Seconds since an expired Lease's term ended (renewTime + leaseDurationSeconds); 0 when it has no time."""
    renew = _renewed(spec)
    if renew is None:
        return 0.0
    duration = float(spec.get("leaseDurationSeconds") or LEASE_DURATION)
    return max(0.0, (now - renew).total_seconds() - duration)


def lease_expired(spec: dict[str, Any], now: datetime) -> bool:
    renew = _renewed(spec)
    duration = spec.get("leaseDurationSeconds") or LEASE_DURATION
    return renew is None or (now - renew).total_seconds() > float(duration)


class Leadership:
    def __init__(
        self,
        source: Transport,
        *,
        mode: str,
        namespace: str,
        name: str,
        identity: str,
        hostname: str,
        retry_period: float = RETRY_PERIOD,
        lease_duration: float = LEASE_DURATION,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.source = source
        # Monotonic seconds; a test passes a fake clock's `now` (looked up at each call, so the default follows time.monotonic).
        self._clock: Callable[[], float] = clock or (lambda: time.monotonic())
        self.mode = mode
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.hostname = hostname
        self.retry_period = retry_period
        self.lease_duration = lease_duration
        self.follow_validity = FOLLOW_VALIDITY_POLLS * retry_period
        self.takeover_delay = self.follow_validity + TAKEOVER_MARGIN
        self._leader = False
        self._valid_until = 0.0
        self._active_from = 0.0  # follow mode: allocate only from here (the hand-over wait)
        self._fresh_wait = False  # follow mode: that wait is a fresh Lease's (binds may wait it out)
        self._poll_lock = asyncio.Lock()  # one Lease read at a time: the periodic one or one asked for by a bind
        self._asked_at = 0.0  # when the last Lease read was sent
        self._last_holder: str | None = None  # follow mode: the holder seen at the previous poll
        # Follow mode: the previous read found no live holder (no Lease, or one long expired): since when for
        # sure (time.monotonic()), and the Lease's leaseTransitions then (-1: no Lease); None: it found a live holder.
        self._last_unheld: tuple[float, int] | None = None
        # Follow mode: why no scheduler leads with the followed Lease (None: someone renews it).
        self.lease_problem: str | None = None
        self._missing_since: float | None = None
        # Elect mode, client-go's observedRecord/observedTime: the Lease's spec as last read, and when (our clock)
        # it was first seen so. Another holder's Lease is taken only a whole lease duration after that.
        self._observed: tuple[Any, ...] | None = None
        self._observed_at = 0.0

    @classmethod
    def choose(cls, source: Transport, *, scheduler_config: str | None, follow_scheduler_lease: str | None) -> Leadership | None:
        """Follow the Lease of the scheduler configuration or the one named NAMESPACE/NAME, else elect (the flags' values).

        None when `scheduler_config` names a scheduler that does not elect (a single one: always leader).
        """
        hostname = os.environ.get("HOSTNAME") or socket.gethostname()
        if scheduler_config:
            refuse_in_tree_allocator(scheduler_config)
            lease = lease_from_scheduler_config(scheduler_config)
            if lease is None:
                return None
            return cls(source, mode="follow", namespace=lease[0], name=lease[1], identity=hostname, hostname=hostname)
        if follow_scheduler_lease:
            namespace, sep, name = follow_scheduler_lease.partition("/")
            if not sep or not namespace or not name:
                raise ValueError(f"--follow-scheduler-lease: expected NAMESPACE/NAME, got {follow_scheduler_lease!r}")
            return cls(source, mode="follow", namespace=namespace, name=name, identity=hostname, hostname=hostname)
        identity = f"{hostname}_{uuid.uuid4()}"
        return cls(source, mode="elect", namespace=pod_namespace(), name="dra-extender", identity=identity, hostname=hostname)

    def is_leader(self) -> bool:
        # Leadership lapses on its own if renewals (follow: polls) stop, e.g. the API
        # server is unreachable; in follow mode it starts only after the hand-over wait.
        now = self._clock()
        return self._leader and self._active_from <= now < self._valid_until

    def leading_in(self) -> float | None:
        """Seconds until this sidecar may allocate, while it waits after its scheduler created a fresh Lease; else None.

        A /bind that arrives in that wait may wait for it within its own
        deadline (LeadershipGate.may_write_by in tracker/leadership_gate.py) rather than fail as "not leader":
        it still asks `is_leader` afterwards, so a poll that saw the Lease
        move on in the meantime still refuses it. A hand-over from another
        holder is not waited for: those binds answer "not leader" at once.
        """
        if not self._leader or not self._fresh_wait:
            return None
        left = self._active_from - self._clock()
        return left if left > 0 else None

    async def poll_if_missing(self) -> None:
        """Read the Lease now if the last read found no live holder (a bind is asking; our scheduler may have just taken it).

        Concurrent callers share one read, and a read less than
        ON_DEMAND_INTERVAL after the last one is not repeated, so binds
        that arrive while no Lease exists cost the API server a read per
        that interval at most.
        """
        if self.mode != "follow" or self._last_unheld is None:
            return
        if self._poll_lock.locked():
            async with self._poll_lock:
                return
        if self._clock() - self._asked_at < ON_DEMAND_INTERVAL:
            return
        async with self._poll_lock:
            await self._follow_once()

    def _set(self, leader: bool, why: str, *, asked_at: float) -> None:
        """Lead (or not) on what a read or write sent at `asked_at` found: a lead counts from then, not from its answer."""
        if leader != self._leader:
            log.info("leadership changed", extra={"leader": leader, "lease": f"{self.namespace}/{self.name}", "why": why})
        self._leader = leader
        if leader:
            self._valid_until = asked_at + (self.follow_validity if self.mode == "follow" else self.lease_duration)

    async def run(self) -> None:
        try:
            while True:
                try:
                    if self.mode == "follow":
                        async with self._poll_lock:
                            await self._follow_once()
                    else:
                        await self._elect_once()
                except asyncio.CancelledError:
                    raise
                except Exception as e:
                    log.warning("lease check failed", extra={"lease": f"{self.namespace}/{self.name}", "err": str(e)})
                await asyncio.sleep(self.retry_period)
        finally:
            if self.mode == "elect" and self._leader:
                await asyncio.shield(self.release())

    async def release(self) -> None:
        """Stop leading, then hand the Lease back as client-go's ReleaseOnCancel does: no holder, a 1 s duration.

        Leadership ends before the write, so nothing of this process acts
        on it while the next candidate takes the Lease at once (a Lease
        without a holder is free to client-go). Called once the
        controllers have stopped (dra_extender/cli.py's shutdown order).
        """
        ref = f"{self.namespace}/{self.name}"
        self._leader, self._valid_until = False, 0.0
        log.info("leadership changed", extra={"leader": False, "lease": ref, "why": "stopping"})
        try:
            _, lease = await self._get_lease()
            spec = dict((lease or {}).get("spec") or {})
            if lease is None or spec.get("holderIdentity") != self.identity:
                log.info("lease not released: not held by this process", extra={"lease": ref, "holder": spec.get("holderIdentity") or ""})
                return
            now = rfc3339(_now(), micro=True)
            spec.update(holderIdentity="", leaseDurationSeconds=1, acquireTime=now, renewTime=now)
            lease["spec"] = spec
            status, body = await self.source.request(
                "PUT", f"{LEASES.collection(self.namespace)}/{self.name}", body=lease, content_type="application/json"
            )
        except Exception as e:  # stopping: say so, and let the Lease expire
            log.error("could not release the lease; it expires on its own", extra={"lease": ref, "err": str(e) or repr(e)})
            return
        if status != 200:
            log.error(
                "could not release the lease; it expires on its own",
                extra={"lease": ref, "status": status, "err": body[:200].decode(errors="replace")},
            )
            return
        log.info("released lease", extra={"lease": ref})

    async def _get_lease(self) -> tuple[int, dict[str, Any] | None]:
        status, body = await self.source.request("GET", LEASES.item(self.namespace, self.name))
        if status == 404:
            return status, None
        if status != 200:
            raise RuntimeError(f"get Lease {self.namespace}/{self.name}: HTTP {status}")
        return status, orjson.loads(body)

    def _report(self, problem: str | None) -> None:
        """Say it loudly, once per change: nobody renews the Lease this sidecar follows (a wrong name, or no scheduler leads)."""
        if problem is not None and self.lease_problem is None:
            log.warning(
                "followed lease is not renewed by anyone: this sidecar will never allocate",
                extra={"lease": f"{self.namespace}/{self.name}", "why": problem},
            )
        elif problem is None and self.lease_problem is not None:
            log.info("followed lease is renewed again", extra={"lease": f"{self.namespace}/{self.name}"})
        self.lease_problem = problem

    def _check_renewed(self, lease: dict[str, Any] | None, asked_at: float) -> None:
        ref = f"Lease {self.namespace}/{self.name}"
        hint = "check that the scheduler's leaderElection (resourceNamespace/resourceName) names this Lease and that it runs"
        if lease is None:
            self._missing_since = self._missing_since if self._missing_since is not None else asked_at
            missing_for = asked_at - self._missing_since
            if missing_for > self.lease_duration:
                self._report(f"{ref} has not existed for {missing_for:.0f} s: no kube-scheduler takes it; {hint}")
            return
        self._missing_since = None
        spec = lease.get("spec") or {}
        renew = _renewed(spec)
        duration = float(spec.get("leaseDurationSeconds") or LEASE_DURATION)
        age = None if renew is None else (_now() - renew).total_seconds()
        if age is None or age > duration:
            since = "never renewed" if age is None else f"not renewed for {age:.0f} s"
            self._report(f"{ref} {since} (leaseDurationSeconds {duration:g}): no kube-scheduler leads with it; {hint}")
        else:
            self._report(None)

    async def _follow_once(self) -> None:
        asked_at = self._asked_at = self._clock()
        _, lease = await self._get_lease()
        self._check_renewed(lease, asked_at)
        previous, self._last_holder = self._last_holder, None
        unheld, self._last_unheld = self._last_unheld, None
        if lease is None:
            self._last_unheld = (asked_at, -1)
            self._set(False, "scheduler lease not found", asked_at=asked_at)
            return
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        self._last_holder = holder
        transitions = spec.get("leaseTransitions")
        if not holder.startswith(f"{self.hostname}_") or lease_expired(spec, _now()):
            now = _now()
            if isinstance(transitions, int) and lease_expired(spec, now - timedelta(seconds=TAKEOVER_MARGIN)):
                # Expired (or released) for longer than the clocks may differ: free since its expiry,
                # counted on our clock with that allowance.
                self._last_unheld = (asked_at - _expired_for(spec, now) + TAKEOVER_MARGIN, transitions)
            self._set(False, f"lease held by {holder or 'nobody'}", asked_at=asked_at)
            return
        if not self._leader:
            # Our scheduler just took the Lease. If it took it from someone else, that
            # holder's sidecar may still be allocating until its own next poll: wait.
            acquired = parse_rfc3339(spec.get("acquireTime"))
            recent = acquired is not None and (_now() - acquired).total_seconds() < self.takeover_delay
            handed_over = holder != previous if previous is not None else recent
            self._active_from = asked_at + self.takeover_delay if handed_over else 0.0
            self._fresh_wait = False
            if unheld is not None and isinstance(transitions, int) and transitions == unheld[1] + 1:
                # The previous read found no live holder (no Lease, or one expired for longer
                # than the clocks may differ), and the Lease has changed holder exactly once
                # since, to ours (client-go counts every change of holder; a Lease it creates
                # has 0). Whoever led before last saw a live Lease before it was free (that read
                # for a missing Lease, its expiry for an expired or released one), so its sidecar
                # stopped by then + follow_validity: a fresh start (our scheduler takes a free
                # Lease and leads at once) waits from then, not a whole delay from this read.
                missing_at = unheld[0]
                handed_over = missing_at + self.takeover_delay > asked_at
                self._active_from = missing_at + self.takeover_delay if handed_over else 0.0
                self._fresh_wait = handed_over
            if handed_over:
                log.info(
                    "lease handed over to our scheduler; allocating after the previous holder's sidecar stops",
                    extra={"lease": f"{self.namespace}/{self.name}", "previous": previous or "", "wait_s": self.takeover_delay},
                )
        self._set(True, f"co-located scheduler {holder} holds the lease", asked_at=asked_at)

    def _observe(self, spec: dict[str, Any]) -> float:
        """When (our clock) the Lease was first seen as it is now: client-go's observedTime, reset by any change of its record."""
        record = tuple(spec.get(k) for k in ("holderIdentity", "leaseDurationSeconds", "acquireTime", "renewTime", "leaseTransitions"))
        if record != self._observed:
            self._observed, self._observed_at = record, self._clock()
        return self._observed_at

    async def _elect_once(self) -> None:
        # Taken before anything is sent (client-go's tryAcquireOrRenew): an answer that comes back late
        # does not stretch the lead past what the Lease we write promises the other candidates.
        asked_at = self._clock()
        now = _now()
        _, lease = await self._get_lease()
        path = LEASES.collection(self.namespace)
        if lease is None:
            body = {
                "apiVersion": LEASES.api_version,
                "kind": LEASES.kind,
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": {
                    "holderIdentity": self.identity,
                    "leaseDurationSeconds": int(self.lease_duration),
                    "acquireTime": rfc3339(now, micro=True),
                    "renewTime": rfc3339(now, micro=True),
                    "leaseTransitions": 0,
                },
            }
            status, _ = await self.source.request("POST", path, body=body, content_type="application/json")
            created = status in (200, 201)
            self._set(created, "created lease" if created else f"create failed: {status}", asked_at=asked_at)
            return
        spec = dict(lease.get("spec") or {})
        holder = spec.get("holderIdentity") or ""
        observed_at = self._observe(spec)
        if holder and holder != self.identity:
            # Another holder's term is counted on our clock from when we saw its Lease change, never from its
            # renewTime (the clocks may differ); the longer of its duration and ours, so neither side is cut short.
            duration = max(float(spec.get("leaseDurationSeconds") or 0), self.lease_duration)
            if observed_at + duration > self._clock():
                self._set(False, f"lease held by {holder}", asked_at=asked_at)
                return
        if holder != self.identity:
            spec["acquireTime"] = rfc3339(now, micro=True)
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
        spec["holderIdentity"] = self.identity
        spec["renewTime"] = rfc3339(now, micro=True)
        spec["leaseDurationSeconds"] = int(self.lease_duration)
        lease["spec"] = spec
        status, _ = await self.source.request("PUT", f"{path}/{self.name}", body=lease, content_type="application/json")
        if status == 200:
            self._set(True, "renewed lease" if holder == self.identity else "acquired lease", asked_at=asked_at)
        else:
            self._set(False, f"lease update failed: HTTP {status}", asked_at=asked_at)
