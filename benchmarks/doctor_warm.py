"""Wall time of `stackctl doctor RECIPE` on a running stack (target: under 1 s for recipes/cpu-lmcache.toml), the
whole run and each scope alone, as medians of N runs taken in turn (so load drifts into every figure alike), and the
checks that took longest (each check's `seconds` in the JSON report; the first check to need a shared fact pays for
it). A run in which a check failed is not a figure of a healthy stack (a failed check can return early, or late): the
script stops naming the check instead of timing it. Usage: python benchmarks/doctor_warm.py [RECIPE] [-n N]. Needs the stack up (and, for an S3 tier, the
variables its keys name)."""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TARGET_S = 1.0
RUNS = {"doctor": [], "--scope host": ["--scope", "host"], "--scope image": ["--scope", "image"],
        "--scope server": ["--scope", "server"]}


def run_once(recipe: str, extra: list[str]) -> tuple[float, dict]:
    command = [sys.executable, "-m", "stackctl", "doctor", recipe, "--format", "json", *extra]
    started = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, cwd=REPO)
    wall = time.perf_counter() - started
    if result.returncode not in (0, 1):
        sys.exit(f"{' '.join(command)} could not run (exit {result.returncode}):\n{result.stdout}{result.stderr}")
    report = json.loads(result.stdout)
    failing = [f"{r['id']}: {r['message']}" for r in report["results"] if r["status"] == "fail"]
    if failing:
        sys.exit(f"{' '.join(command)}: a check failed, so this is not the time of a healthy stack's doctor:\n  "
                 + "\n  ".join(failing))
    return wall, report


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("recipe", nargs="?", default=str(REPO / "recipes" / "cpu-lmcache.toml"))
    parser.add_argument("-n", type=int, default=7)
    args = parser.parse_args()
    walls: dict[str, list[float]] = defaultdict(list)
    checks: dict[str, list[float]] = defaultdict(list)
    for _ in range(args.n):
        for label, extra in RUNS.items():
            wall, report = run_once(args.recipe, extra)
            walls[label].append(wall)
            if label == "doctor":
                for result in report["results"]:
                    if "seconds" in result:
                        checks[result["id"]].append(result["seconds"])
    for label, times in walls.items():
        target = f" (target < {TARGET_S:g} s)" if label == "doctor" else ""
        print(f"{label:<16} median {statistics.median(times):5.2f} s, min {min(times):5.2f} s, max {max(times):5.2f} s "
              f"over {args.n} runs{target}")
    slowest = sorted(checks.items(), key=lambda item: -statistics.median(item[1]))[:10]
    if slowest:
        print("slowest checks in `doctor` (median s):")
        for check_id, times in slowest:
            print(f"  {statistics.median(times):6.3f}  {check_id}")


if __name__ == "__main__":
    main()
