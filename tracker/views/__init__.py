"""The patched device views: every device as the allocator and the eviction controller see it.

`devices.DeviceViews` composes one part per job: intake of slices (`slice_intake`) and of classes,
rules and patches (`selector_intake`), the indexes (`index`), the views themselves (`builder`,
over `patched` for one device), when views are computed (`recompute`, `warmup`), which nodes a
change concerns (`node_changes`) and the read queries (`queries`). Above the object store and
the ledger, below tracker.state; import-linter holds it.
"""
