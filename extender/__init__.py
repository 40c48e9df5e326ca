"""The dra-extender process: kube-scheduler's extender verbs over the tracker's state.

- `cli` wires a source, the state, the allocator and HTTP together;
  `app`, `routes/` and `http_thread` are the HTTP edge over `wire`, the
  extender wire format.
- `service.Service` sequences the verbs over one package each: `filter/`
  (which nodes fit, and why not), `prioritize/` (the ranking /filter keeps)
  and `bind/` (decide, then write claims and the Binding). /filter and /bind
  meet only in the service and the placement gate (`placements`).
- Beside the verbs: the eviction controller (`eviction/`), device health
  policies (`health/`), the schedulerName webhook (`webhook/`), requeue
  nudges (`requeue`), pods of other schedulers (`foreign_pods`), metrics and logs.

The layers are import-linter contracts (pyproject.toml, docs/design.md#architecture).
"""
