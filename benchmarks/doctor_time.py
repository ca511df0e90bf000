"""Wall time of `stackctl doctor RECIPE --scope host,image` (target: under 3 s; the image facts come from one
container run, and are reused while the image id and environment stay the same). Prints the first look at an image
(--fresh: the hash probe imports vLLM twice) and the repeat. Usage: python benchmarks/doctor_time.py [RECIPE] [-n N].
Needs the recipe's image built."""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("recipe", nargs="?", default=str(REPO / "recipes" / "cpu-smoke.toml"))
    parser.add_argument("-n", type=int, default=5)
    args = parser.parse_args()
    command = [sys.executable, "-m", "stackctl", "doctor", args.recipe, "--scope", "host,image", "--format", "json"]
    for label, extra in (("first look at the image (--fresh)", ["--fresh"]), ("image facts known", [])):
        times = []
        for _ in range(args.n):
            started = time.perf_counter()
            result = subprocess.run(command + extra, capture_output=True, text=True)
            times.append(time.perf_counter() - started)
            if result.returncode == 2:
                sys.exit(f"doctor could not run:\n{result.stdout}{result.stderr}")
        print(f"doctor --scope host,image, {label:<34} median {statistics.median(times):6.2f} s, "
              f"min {min(times):6.2f} s, max {max(times):6.2f} s over {args.n} runs (target < 3 s)")


if __name__ == "__main__":
    main()
