#!/usr/bin/env python3
"""Matmul probe: the GFLOP/s this host reaches in each dtype, measured inside the stack's image with its own torch.

Runs where the facts are: the image's torch, the container's CPUs and the stack's environment (ONEDNN_MAX_CPU_ISA and
ATEN_CPU_CAPABILITY cap what torch may use, so they count). Prints one JSON object on stdout and always exits 0;
a dtype it cannot measure has "gflops": null and the reason in "error".

The shape is a prefill-like GEMM (M tokens x K hidden @ K x N). A small one is timed first; where it runs fast (a
native dtype) a prefill-sized one (2048 x 1024 @ 1024 x 4096, where AMX reaches its stride) is timed for the budget,
and the fastest call gives the figure: a peak, so that a server's prefill is compared with the best this host does.
An emulated dtype (0.4 GFLOP/s where a CPU has no native bf16) stays on the small shape and answers in seconds.

Beside the matmuls, one core's memcpy (a 64 MiB tensor copied on one thread, the fastest of a few): what a cache hit's
load of KV bytes is compared with.

Usage: peak.py [--dtypes float32,bfloat16] [--budget-s 1.0]

Output: {"schema": 1, "torch": "2.13.0+cpu", "capability": "AVX512", "threads": 2, "error": null,
         "dtypes": {"float32": {"gflops": 120.5, "runs": 40, "seconds": 1.0, "shape": [2048, 1024, 4096],
         "error": null}, ...}, "memcpy": {"gb_s": 6.1, "threads": 1, "error": null}}
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

SMALL = (256, 1024, 1024)  # M, K, N: 0.54 GFLOP a call
LARGE = (2048, 1024, 4096)  # 17 GFLOP a call: timed only when the small shape takes under FAST_S
FAST_S = 0.05
WARM_UP_ROWS = 16  # the first call of a dtype pays oneDNN's kernel generation: done on a 16-row slice


def measure(torch, dtype_name: str, budget_s: float) -> dict:
    dtype = getattr(torch, dtype_name, None)
    if not isinstance(dtype, torch.dtype):
        return {"gflops": None, "runs": 0, "seconds": 0.0, "shape": None, "error": f"torch has no dtype {dtype_name}"}
    generator = torch.Generator().manual_seed(0)
    try:
        shape, seconds = SMALL, _time_calls(torch, SMALL, dtype, generator, budget_s=0.0)
        if min(seconds) < FAST_S:
            shape, seconds = LARGE, _time_calls(torch, LARGE, dtype, generator, budget_s)
    except (RuntimeError, TypeError) as exc:  # a dtype the build cannot multiply
        return {"gflops": None, "runs": 0, "seconds": 0.0, "shape": None, "error": f"{type(exc).__name__}: {exc}"[:300]}
    m, k, n = shape
    return {"gflops": round(2.0 * m * k * n / min(seconds) / 1e9, 3), "runs": len(seconds),
            "seconds": round(sum(seconds), 3), "shape": list(shape), "error": None}


def _time_calls(torch, shape, dtype, generator, budget_s: float) -> list:
    """Seconds of each timed call: at least one, more until the budget is spent (after an untimed warm-up)."""
    m, k, n = shape
    a = torch.randn(m, k, generator=generator).to(dtype)
    b = torch.randn(k, n, generator=generator).to(dtype)
    torch.matmul(a[:WARM_UP_ROWS], b)
    seconds, started = [], time.perf_counter()
    while True:
        begin = time.perf_counter()
        torch.matmul(a, b)
        seconds.append(time.perf_counter() - begin)
        if time.perf_counter() - started >= budget_s:
            return seconds


MEMCPY_BYTES = 64 * 1024 * 1024
MEMCPY_RUNS = 5


def memcpy(torch) -> dict:
    """One core's copy bandwidth (bytes read once and written once, as a KV load does), the fastest of a few runs."""
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        source = torch.ones(MEMCPY_BYTES, dtype=torch.uint8)
        target = torch.empty_like(source)
        target.copy_(source)  # untimed: the first touch of the target's pages
        best = min(_timed(lambda: target.copy_(source)) for _ in range(MEMCPY_RUNS))
        return {"gb_s": round(MEMCPY_BYTES / best / 1e9, 3), "threads": 1, "error": None}
    except (RuntimeError, MemoryError) as exc:
        return {"gb_s": None, "threads": 1, "error": f"{type(exc).__name__}: {exc}"[:300]}
    finally:
        torch.set_num_threads(threads)


def _timed(call) -> float:
    begin = time.perf_counter()
    call()
    return time.perf_counter() - begin


def main(argv: list[str]) -> dict:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--budget-s", type=float, default=1.0)
    args = parser.parse_args(argv)
    result: dict = {"schema": 1, "torch": None, "capability": None, "threads": None, "dtypes": {}, "error": None}
    try:
        import torch
    except ImportError as exc:
        result["error"] = f"torch does not import: {exc}"
        return result
    # As many threads as the container may run on: what the server's own matmuls get.
    threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    torch.set_num_threads(threads)
    result.update(torch=torch.__version__, threads=torch.get_num_threads())
    try:
        result["capability"] = torch.backends.cpu.get_cpu_capability()
    except AttributeError:
        pass
    for name in [d.strip() for d in args.dtypes.split(",") if d.strip()]:
        result["dtypes"][name] = measure(torch, name, args.budget_s)
    result["memcpy"] = memcpy(torch)
    return result


if __name__ == "__main__":
    real_stdout = sys.stdout
    sys.stdout = sys.stderr  # anything torch prints stays off the JSON line
    try:
        outcome = main(sys.argv[1:])
    except Exception as exc:  # noqa: BLE001 - the probe reports, it never crashes
        outcome = {"schema": 1, "error": f"{type(exc).__name__}: {exc}"[:300], "dtypes": {}}
    real_stdout.write(json.dumps(outcome) + "\n")
