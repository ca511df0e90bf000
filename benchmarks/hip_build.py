"""The ROCm build path for both targets, timed: the HIP toolchain and its test stand-in for a ROCm torch
(scripts/make-hip-toolchain.sh --test-torch), then `stackctl build recipes/rocm-build-check.toml` (LMCache compiled
for gfx942 and gfx950) and `stackctl doctor --scope image` on the artifact. CI compiles one target
(tests/integration/test_hip_build.py); this is the two-target figure.

Usage: python benchmarks/hip_build.py [--recipe recipes/rocm-build-check.toml] [--no-cache]
  --no-cache: compile again without the layer cache (the cold figure); without it a built image is reused.
Needs a Docker engine and debootstrap. Prints each step's wall time and doctor's table; leaves no container behind.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def timed(what: str, argv: list[str]) -> float:
    started = time.perf_counter()
    result = subprocess.run(argv, cwd=REPO, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if result.returncode not in (0, 1) or (result.returncode == 1 and "doctor" not in argv):
        sys.exit(f"{what} failed ({result.returncode}):\n{result.stdout[-3000:]}\n{result.stderr[-5000:]}")
    print(f"{elapsed:8.0f} s  {what}", flush=True)
    if "doctor" in argv:
        print(result.stdout)
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipe", default="recipes/rocm-build-check.toml")
    parser.add_argument("--no-cache", action="store_true", help="compile without the layer cache")
    args = parser.parse_args()
    stackctl = [sys.executable, "-m", "stackctl"]
    timed("HIP toolchain + stand-in torch", ["bash", "scripts/make-hip-toolchain.sh", "--test-torch"])
    timed(f"stackctl build {args.recipe}", [*stackctl, "build", args.recipe, *(["--no-cache"] if args.no_cache else [])])
    timed("stackctl doctor --scope image", [*stackctl, "doctor", args.recipe, "--scope", "image", "--fresh"])


if __name__ == "__main__":
    main()
