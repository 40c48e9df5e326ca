"""The stand-in for kube-controller-manager's resourceclaim controller in `--source DIR` mode.

In a cluster that controller drops a deleted pod from its claims'
`reservedFor` and deallocates a claim nobody reserves any more (removing
the delete-protection finalizer with the allocation). A directory has no
controller, so the manifest source does that itself when a pod is deleted
(through the overlay or by removing its manifest).
"""

from __future__ import annotations

import copy

from allocator.types import DELETE_PROTECTION_FINALIZER
from tracker import events as ev
from tracker.manifest.directory import object_ref
from tracker.manifest.load import Identity
from tracker.manifest.overlay import OverlayStore


class ClaimController:
    """Releases a deleted pod's claims in the overlay."""

    def __init__(self, store: OverlayStore) -> None:
        self.store = store

    def release(self, pod: Identity, uid: str, *, emit: bool) -> None:
        """Drop the pod's reservations, and the allocation of a claim nobody reserves any more."""
        store = self.store
        for ident, current in list(store.objects.items()):
            if ident[0] != ev.RESOURCE_CLAIM:
                continue
            status = current.get("status") or {}
            reserved = status.get("reservedFor") or []
            kept = [r for r in reserved if not (isinstance(r, dict) and r.get("uid") == uid)]
            if len(kept) == len(reserved):
                continue
            over = store.overlay_of(ident)
            over.status = {**copy.deepcopy(status), "reservedFor": kept}
            if not kept:
                over.status.pop("reservedFor")
                over.status.pop("allocation", None)
                finalizers = current["metadata"].get("finalizers") or []
                over.finalizers = [f for f in finalizers if f != DELETE_PROTECTION_FINALIZER]
            if emit:
                store.commit(ident, "release reservation of deleted pod", pod=object_ref(pod), deallocated=not kept)
            else:
                store.store(ident)
