"""The pieces of `bench.bench_workloads` (the scheduler_perf-style DRA workloads), one job per module."""
