"""Each node-local slice view's content digest: equal for two slices whose effective devices are equal but for names.

One part of the device views (tracker/views/devices.py). The verdict cache
shares a fresh node's verdict with the other fresh nodes whose slices have
the same digests (extender/filter/shapes.py), so a digest must cover
everything allocation reads of a slice view except the names that differ
between nodes (the node's, the pool's and the slice's):

- each device as the driver published it: the intake's digest of its raw
  JSON (tracker/views/slice_intake.py), which covers its name, attributes,
  capacity, taints, counters it consumes, binding conditions and every other
  field the parser reads;
- what the view changed of it: the effective taints with their sources
  (the slice's, every DeviceTaintRule's, the pending-selectors taint) and the
  ResourceSlicePatches applied, by name and version (their content is
  versioned: tracker/views/builder.py CelVersions);
- the slice's own fields: driver, generation, resourceSliceCount and its
  shared counters.

Kept when a slice view is set, so a /filter reads it rather than computes
it. A slice with no digest (not node-local, per-device node selection, a
device without a raw digest, a view changed in a way not named above) is
never shared: its nodes compute their verdicts.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from allocator.device_view import SliceView
from allocator.parse import DeviceDigest

# slice name -> device name -> (the raw device's DeviceDigest, or the raw device itself; the parsed Device)
RawDevices = dict[str, dict[str, tuple[Any, Any]]]


def slice_digest(view: SliceView, raw: Mapping[str, tuple[Any, Any]] | None) -> bytes | None:
    """The view's content digest (16 bytes), or None when the slice may not be shared."""
    if raw is None or view.node_name is None or view.per_device_node_selection or view.node_selector is not None or view.all_nodes:
        return None
    counters = tuple(
        (cs.name, tuple((c, q.value.numerator, q.value.denominator, q.text) for c, q in cs.counters.items())) for cs in view.shared_counters
    )
    head = repr((view.driver, view.generation, view.resource_slice_count, counters, len(view.devices))).encode()
    parts = [len(head).to_bytes(4, "big"), head]
    append = parts.append
    get = raw.get
    for d in view.devices:
        entry = get(d.id.device)
        if entry is None or not isinstance(entry[0], DeviceDigest):
            return None
        parsed = entry[1]
        append(entry[0].whole)  # 16 bytes: fixed width, so the parts cannot run into each other
        changed: tuple[Any, ...] = ()
        if d.taints or d.taint_sources:
            changed = (d.taints, d.taint_sources)
        if d.attributes is not parsed.attributes or d.capacity is not parsed.capacity:
            key = d.cel_key
            if not (isinstance(key, tuple) and len(key) == 3 and key[0] == "patched"):
                return None  # changed by something this digest does not name
            changed = (*changed, "patched", key[2])
        if changed:
            extra = repr(changed).encode()
            append(b"\x01" + len(extra).to_bytes(4, "big"))
            append(extra)
        else:
            append(b"\x00")
    return hashlib.blake2b(b"".join(parts), digest_size=16).digest()
