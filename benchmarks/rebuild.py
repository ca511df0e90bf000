"""Changing only runtime tuning never rebuilds: `up` after a serve-flag and a tier-size change, timed against a
cold build of the same recipe, measured in one run.

Usage: python benchmarks/rebuild.py [--recipe cpu-smoke] [--cold-seconds S]
  --cold-seconds: reuse a cold build time measured earlier instead of building again without cache (~10 min here).
Needs a Docker engine and the base image (scripts/make-base-image.sh). Leaves no container behind.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def stackctl(*args: str, env: dict) -> tuple[float, subprocess.CompletedProcess]:
    started = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "stackctl", *args], env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if result.returncode != 0:
        sys.exit(f"stackctl {' '.join(args)} failed:\n{result.stderr[-3000:]}")
    return elapsed, result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--recipe", default=str(REPO / "recipes" / "cpu-smoke.toml"))
    parser.add_argument("--cold-seconds", type=float)
    args = parser.parse_args()
    env = dict(os.environ)
    with tempfile.TemporaryDirectory() as tmp:
        env.setdefault("STACKCTL_STATE_DIR", tmp)
        original = Path(args.recipe).read_text()
        if args.cold_seconds:
            cold = args.cold_seconds
        else:
            cold, _ = stackctl("build", args.recipe, "--no-cache", env=env)
        print(f"cold build (no layer cache)          {cold:8.1f} s")
        tuned = Path(tmp) / "tuned.toml"
        tuned.write_text(original.replace("max_num_batched_tokens = 4096", "max_num_batched_tokens = 2048")
                         .replace("enforce_eager = true", "enforce_eager = true\nasync_scheduling = true"))
        try:
            build_time, result = stackctl("build", str(tuned), env=env)
            rebuilt = "up to date" not in result.stderr
            up_time, _ = stackctl("up", str(tuned), env=env)
        finally:
            stackctl("down", str(tuned), env=env)
    print(f"build after a runtime-only change    {build_time:8.1f} s  (rebuilt: {'YES' if rebuilt else 'no'})")
    print(f"up after the change (start + health) {up_time:8.1f} s")
    print(f"rebuild / cold build ratio           {build_time / cold:8.4f}")


if __name__ == "__main__":
    main()
