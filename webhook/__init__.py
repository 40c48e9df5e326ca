"""`dra-extender webhook`: a mutating admission webhook that sends DRA pods to the dra-extender scheduler.

On managed clusters the default scheduler cannot be reconfigured, so the chart
runs a second one; nothing would make pods use it, and two schedulers
allocating the same devices promise a device twice. This webhook sets
`spec.schedulerName` on a new pod that uses DRA (allocator.pod_claims.dra_use):
resource claims, or a container resource that is a DRA-backed extended
resource (a DeviceClass's `spec.extendedResourceName`, known from a watch,
or `deviceclass.resource.kubernetes.io/<class>`).

It never touches a pod that asks for another scheduler by name, one already
bound to a node, one in an excluded namespace, or one that uses no DRA
device; it always allows the pod (the decision is only where it is
scheduled). Pods it cannot send are the extender's to flag
(controllers/foreign_pods.py).

Modules: review (the AdmissionReview, parsed and answered), classes (the
DeviceClass watch), app (the HTTP edge and its limits), serve (flags, TLS).
"""

from __future__ import annotations

from webhook.serve import add_parser, serve_webhook

__all__ = ["add_parser", "serve_webhook"]
