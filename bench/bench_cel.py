"""What a CEL device selector costs: interpreted vs compiled runner, activations, cache hits.

Runs the selector engine (allocator.cel) on 10,000 synthetic devices shaped
like GPU ResourceSlice entries (10 attributes of mixed kinds, 3 capacities)
with four representative selectors, and writes bench/results/cel.json and
bench/results/cel.md.

    .venv/bin/python -m bench.bench_cel [--devices N]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import sys
import time
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from celpy.evaluation import Activation

from allocator.cel import CelEnvironment
from allocator.cel.engine import device_value
from allocator.cel.interpret import INTERP_FUNCTIONS
from allocator.quantity import Quantity, parse_quantity
from allocator.semver import Semver, parse_semver

RESULTS = Path(__file__).resolve().parent / "results"

SELECTORS: dict[str, str] = {
    "driver equality": 'device.driver == "gpu.example.com"',
    "string attribute equality": 'device.attributes["gpu.example.com"].productName == "NVIDIA A100-SXM4-80GB"',
    "quantity compareTo": 'device.capacity["gpu.example.com"].memory.compareTo(quantity("40Gi")) >= 0',
    "semver isGreaterThan": 'device.attributes["gpu.example.com"].driverVersion.isGreaterThan(semver("535.100.0"))',
}


@dataclass(frozen=True, slots=True)
class BenchDevice:
    cel_key: Hashable
    driver: str
    attributes: Mapping[str, int | bool | str | Semver]
    capacity: Mapping[str, Quantity]
    allow_multiple_allocations: bool = False


def make_devices(n: int) -> list[BenchDevice]:
    """Devices of a GPU driver: 10 attributes (string, int, bool, version) and 3 capacities."""
    products = ["NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3", "NVIDIA L4"]
    memories = [parse_quantity("80Gi"), parse_quantity("80Gi"), parse_quantity("24Gi")]
    cores = [parse_quantity("108"), parse_quantity("132"), parse_quantity("58")]
    drivers = [parse_semver(v) for v in ("535.104.5", "550.54.15", "535.86.10", "525.147.5")]
    compute = [parse_semver(v) for v in ("8.0.0", "9.0.0", "8.9.0")]
    out = []
    for i in range(n):
        p = i % 3
        d = "gpu.example.com"
        out.append(
            BenchDevice(
                cel_key=(f"slice-{i // 8}", 1, f"gpu-{i}"),
                driver=d,
                attributes={
                    f"{d}/productName": products[p],
                    f"{d}/uuid": f"GPU-{i * 2654435761 % 2**32:08x}-4c3f-9a1e-{i:012x}",
                    f"{d}/index": i % 8,
                    f"{d}/minor": i % 8,
                    f"{d}/driverVersion": drivers[i % 4],
                    f"{d}/cudaComputeCapability": compute[p],
                    f"{d}/healthy": i % 17 != 0,
                    f"{d}/migCapable": p != 2,
                    f"{d}/pcieRoot": "pci0000:%02x" % (i % 4),
                    "resource.kubernetes.io/numaNode": (i % 8) // 4,
                },
                capacity={
                    f"{d}/memory": memories[p],
                    f"{d}/cores": cores[p],
                    f"{d}/power": parse_quantity("400" if p < 2 else "72"),
                },
            )
        )
    return out


def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    gc.collect()
    t = time.perf_counter()
    result = fn()
    return time.perf_counter() - t, result


def _best(repeats: int, fn: Callable[[], Any]) -> tuple[float, Any]:
    runs = [_timed(fn) for _ in range(repeats)]
    return min(r[0] for r in runs), runs[-1][1]


def _per(seconds: float, n: int) -> float:
    return round(seconds / n * 1e6, 2)


def machine() -> dict[str, Any]:
    return {
        "cores": os.cpu_count(),
        "cpu": platform.processor() or platform.machine(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "cel_python": metadata.version("cel-python"),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def run(n: int) -> dict[str, Any]:
    t_start = time.perf_counter()
    print(f"building {n} devices", flush=True)
    devices = make_devices(n)

    # Activation build: the `device` value every selector reads, built once per device version.
    build_s, values = _best(3, lambda: [device_value(d) for d in devices])
    print(f"activation build: {_per(build_s, n)} us/device", flush=True)
    celpy_build_s, _ = _best(1, lambda: [Activation(functions=INTERP_FUNCTIONS, vars={"device": v}) for v in values])
    print(f"  + celpy Activation for the interpreter: {_per(celpy_build_s, n)} us/device", flush=True)

    # Cold start through the public API: the first selector on unseen devices pays the activations.
    env = CelEnvironment()
    first = env.compile(next(iter(SELECTORS.values())))
    cold_s, _ = _timed(lambda: [env.evaluate(first, d) for d in devices])
    print(f"cold start (first selector, activations included): {cold_s * 1e3:.0f} ms per {n} devices", flush=True)

    selectors = []
    for name, expression in SELECTORS.items():
        row: dict[str, Any] = {"name": name, "expression": expression}
        answers: dict[str, list[bool]] = {}
        for backend, repeats in (("compiled", 3), ("interpreted", 1)):
            env = CelEnvironment(backend=backend)  # type: ignore[arg-type]
            sel = env.compile(expression)
            assert sel.backend == backend, (expression, sel.backend)
            env.evaluate(env.compile("true"), devices[0])  # warm the parser/runtime
            for d in devices:  # activations cached, as in steady state
                env.evaluate(env.compile("true"), d)
            acts = [env._devices[d.cel_key] for d in devices]
            if backend == "compiled":
                run_s, _ = _best(repeats, lambda: [sel.run(a.act) for a in acts])  # noqa: B023
            else:
                for a in acts:
                    assert a.act is not None, "every device's activation was built above"
                    a.interp = Activation(functions=INTERP_FUNCTIONS, vars={"device": a.act.device})
                run_s, _ = _best(repeats, lambda: [sel.run(a.interp) for a in acts])  # noqa: B023

            # Not cached yet for this selector; activations are.
            miss_s, result = _timed(lambda: [env.evaluate(sel, d) for d in devices])  # noqa: B023
            hit_s, again = _best(3, lambda: [env.evaluate(sel, d) for d in devices])  # noqa: B023
            assert result == again
            answers[backend] = result
            row[backend] = {
                "run_us": _per(run_s, n),
                "evaluate_miss_us": _per(miss_s, n),
                "evaluate_hit_us": _per(hit_s, n),
                "per_10k_devices_ms": round(miss_s / n * 10_000 * 1e3, 1),
                "evaluations": env.stats["evaluations"],
            }
            print(
                f"{name:28} {backend:11} run {row[backend]['run_us']:8.2f} us  evaluate(miss) "
                f"{row[backend]['evaluate_miss_us']:8.2f} us  hit {row[backend]['evaluate_hit_us']:5.2f} us",
                flush=True,
            )
        assert answers["compiled"] == answers["interpreted"], f"runners disagree on {expression!r}"
        row["matching_devices"] = sum(answers["compiled"])
        row["speedup"] = round(row["interpreted"]["run_us"] / row["compiled"]["run_us"], 1)
        selectors.append(row)

    return {
        "devices": n,
        "machine": machine(),
        "engine": "compiled (celpy transpiler, own globals and runtime); interpreted = celpy Evaluator, same runtime",
        "activation_build_us": _per(build_s, n),
        "celpy_activation_build_us": _per(celpy_build_s, n),
        "cold_start_first_selector_ms": round(cold_s * 1e3, 1),
        "selectors": selectors,
        "bench_seconds": round(time.perf_counter() - t_start, 1),
    }


def markdown(r: dict[str, Any]) -> str:
    m = r["machine"]
    n = r["devices"]
    lines = [
        "# CEL selector cost",
        "",
        f"{n:,} synthetic GPU devices (10 attributes: strings, ints, bools, versions; 3 capacities), "
        f"`.venv/bin/python -m bench.bench_cel`.",
        f"Machine: {m['cores']} cores, {m['cpu']}, {m['platform']}; {m['implementation']} {m['python']}; "
        f"cel-python {m['cel_python']}; {m['date']}.",
        "",
        "µs per evaluation. *runner* is the program alone on a prebuilt activation; *evaluate() miss* is the "
        "public call when the result is not cached (activation cached); *hit* is a cached result.",
        "",
        "| selector | matches | interpreted runner | compiled runner | speed-up | compiled evaluate() miss "
        "| cached hit | 10k devices, compiled | 10k devices, interpreted |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for s in r["selectors"]:
        c, i = s["compiled"], s["interpreted"]
        lines.append(
            f"| {s['name']} (`{s['expression']}`) | {s['matching_devices']:,} | {i['run_us']} | {c['run_us']} | "
            f"{s['speedup']}x | {c['evaluate_miss_us']} | {c['evaluate_hit_us']} | "
            f"{c['per_10k_devices_ms']} ms | {i['per_10k_devices_ms']} ms |"
        )
    lines += [
        "",
        f"- Activation build (the `device` value, once per device version): {r['activation_build_us']} µs/device "
        f"({r['activation_build_us'] * 10_000 / 1e3:.0f} ms per 10k devices); the interpreter also needs a celpy "
        f"`Activation` (+{r['celpy_activation_build_us']} µs/device, built lazily).",
        f"- Cold start, first selector on {n:,} unseen devices (activations + evaluations + caching): "
        f"{r['cold_start_first_selector_ms']} ms.",
        "- Both runners returned the same answer for every device and selector.",
        f"- Bench wall time: {r['bench_seconds']} s.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--devices", type=int, default=10_000)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    result = run(args.devices)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "cel.json").write_text(json.dumps(result, indent=2) + "\n")
    (args.out / "cel.md").write_text(markdown(result))
    print(f"wrote {args.out / 'cel.json'} and {args.out / 'cel.md'}")


if __name__ == "__main__":
    main()
