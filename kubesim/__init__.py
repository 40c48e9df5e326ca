"""What the tests and the benchmarks both run the extender against: a simulated cluster.

- `kubesim.fakeapi`: the fake Kubernetes API server (real HTTP, resourceVersions,
  watches, faults), in-process or `python -m kubesim.fakeapi`;
- `kubesim.scheduler`: a model of kube-scheduler 1.36 as an extender client,
  with a resourceclaim-controller stand-in and the workloads it runs;
- `kubesim.objects`, `kubesim.processes`, `kubesim.measure`: cluster objects,
  starting and stopping servers, and the readings (percentiles, CPU, memory);
- `kubesim.clock`: a fake clock the tests move, for every deadline the extender keeps;
- `kubesim.hostile_cel`: hostile CEL selectors, timed by a benchmark and
  checked for their verdicts by the tests.

Its own package so that neither `tests` nor `bench` reaches into the other; it
never imports either, and the production packages never import it (both held
by import-linter, pyproject.toml). It is not shipped: run from the repository.
"""
