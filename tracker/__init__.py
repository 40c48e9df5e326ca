"""What the extender knows about the cluster, kept current: sources in, the cluster state out.

- `state.ClusterState` composes the parts and is all the extender reads: the
  object store (`store`, with `claim_status`, `pod_status` and `volumes`
  parsed at intake), the device views (`views/`) and the allocation ledger
  (`ledger`).
- Two sources feed it ObjectEvents (`events`) through the protocols in
  `source`: the API server (`apiserver/`, which also holds discovery, the
  kubeconfig check and leadership) and a manifest directory (`manifest/`).
  They know nothing of the state nor of each other; `resources` is where
  each kind lives, `k8s_events` the core/v1 Events written through either.

The layers are import-linter contracts (pyproject.toml, docs/design.md#architecture).
"""
