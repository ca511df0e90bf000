"""Wall time of `stackctl doctor RECIPE --scope host,image` (target: under 3 s). Prints the first look at an image
(--fresh: one container run of the image probe and the two hash probes) and the repeat (image facts reused while the
image id and environment stay the same), each also as a multiple of a bare `python3 -c pass`.
Usage: python benchmarks/doctor_time.py [RECIPE] [-n N]. Needs the recipe's image built."""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TARGET_S = 3.0


def timed(command: list[str], runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        result = subprocess.run(command, capture_output=True, text=True, cwd=REPO)
        times.append(time.perf_counter() - started)
        if result.returncode not in (0, 1):
            sys.exit(f"{' '.join(command)} could not run (exit {result.returncode}):\n{result.stdout}{result.stderr}")
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("recipe", nargs="?", default=str(REPO / "recipes" / "cpu-smoke.toml"))
    parser.add_argument("-n", type=int, default=5)
    args = parser.parse_args()
    bare = statistics.median(timed(["python3", "-c", "pass"], args.n))
    print(f"python3 -c pass{'':<46} median {bare:6.3f} s")
    command = [sys.executable, "-m", "stackctl", "doctor", args.recipe, "--scope", "host,image", "--format", "json"]
    for label, extra in (("first look at the image (--fresh)", ["--fresh"]), ("image facts known", [])):
        times = timed(command + extra, args.n)
        median = statistics.median(times)
        print(f"doctor --scope host,image, {label:<34} median {median:6.2f} s, min {min(times):6.2f} s, "
              f"max {max(times):6.2f} s over {args.n} runs, {median / bare:5.1f}x python3 -c pass "
              f"(target < {TARGET_S:g} s)")


if __name__ == "__main__":
    main()
