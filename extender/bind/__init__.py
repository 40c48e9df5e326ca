"""/bind: decide a pod's devices under one lock, then write claims and the Binding concurrently.

`binder.Binder` decides and sequences; the claim writes (`claim_writes`), the undo of a failed
bind (`undo`), the wait for device binding conditions (`wait`, over the rules in `conditions`),
one owner per pod's claims (`pod_owners`) and the tasks a bind does not wait for
(`background`). Knows nothing of /filter (extender/filter/).
"""
