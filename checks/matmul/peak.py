#!/usr/bin/env python3
"""Matmul probe: the GFLOP/s this host reaches in each dtype, measured inside the stack's image with its own torch.

Runs where the facts are: the image's torch, the container's CPUs and the stack's environment (ONEDNN_MAX_CPU_ISA and
ATEN_CPU_CAPABILITY cap what torch may use, so they count). Prints one JSON object on stdout and always exits 0;
a dtype it cannot measure has "gflops": null and the reason in "error".

The shape is a prefill-like GEMM (M tokens x K hidden @ K x N): large enough that the kernel, not the call, is
timed, small enough that an emulated dtype (0.4 GFLOP/s where a CPU has no native bf16) still answers in seconds.

Usage: peak.py [--dtypes float32,bfloat16] [--budget-s 1.0]

Output: {"schema": 1, "torch": "2.13.0+cpu", "capability": "AVX512", "threads": 2,
         "shape": [256, 1024, 1024], "dtypes": {"float32": {"gflops": 120.5, "runs": 40, "seconds": 1.0,
         "error": null}, ...}}
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

SHAPE = (256, 1024, 1024)  # M, K, N: 0.54 GFLOP a call
WARM_UP_ROWS = 16  # the first call of a dtype pays oneDNN's kernel generation: done on a 16-row slice


def measure(torch, dtype_name: str, budget_s: float) -> dict:
    dtype = getattr(torch, dtype_name, None)
    if not isinstance(dtype, torch.dtype):
        return {"gflops": None, "runs": 0, "seconds": 0.0, "error": f"torch has no dtype {dtype_name}"}
    m, k, n = SHAPE
    generator = torch.Generator().manual_seed(0)
    try:
        a = torch.randn(m, k, generator=generator).to(dtype)
        b = torch.randn(k, n, generator=generator).to(dtype)
        torch.matmul(a[:WARM_UP_ROWS], b)
        runs, started = 0, time.perf_counter()
        # At least one call; more until the budget is spent, so a fast dtype is timed over many calls.
        while True:
            torch.matmul(a, b)
            runs += 1
            elapsed = time.perf_counter() - started
            if elapsed >= budget_s:
                break
    except (RuntimeError, TypeError) as exc:  # a dtype the build cannot multiply
        return {"gflops": None, "runs": 0, "seconds": 0.0, "error": f"{type(exc).__name__}: {exc}"[:300]}
    flops = 2.0 * m * k * n * runs
    return {"gflops": round(flops / elapsed / 1e9, 3), "runs": runs, "seconds": round(elapsed, 3), "error": None}


def main(argv: list[str]) -> dict:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--budget-s", type=float, default=1.0)
    args = parser.parse_args(argv)
    result: dict = {"schema": 1, "torch": None, "capability": None, "threads": None, "shape": list(SHAPE),
                    "dtypes": {}, "error": None}
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
    return result


if __name__ == "__main__":
    real_stdout = sys.stdout
    sys.stdout = sys.stderr  # anything torch prints stays off the JSON line
    try:
        outcome = main(sys.argv[1:])
    except Exception as exc:  # noqa: BLE001 - the probe reports, it never crashes
        outcome = {"schema": 1, "error": f"{type(exc).__name__}: {exc}"[:300], "dtypes": {}}
    real_stdout.write(json.dumps(outcome) + "\n")
