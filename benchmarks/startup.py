"""Cold start of `stackctl validate RECIPE` as a ratio of `python3 -c pass` (target: under 4x).

Runs each command N times alternately and compares medians, so machine noise hits both sides alike. The
package's bytecode is compiled first, as `pip install` does.
Usage: python benchmarks/startup.py [RECIPE] [-n N]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def timed(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("recipe", nargs="?", default=str(REPO / "recipes" / "atom-lmcache-cpu-nvme.toml"))
    parser.add_argument("-n", type=int, default=21)
    args = parser.parse_args()
    # pip writes bytecode when it installs a package; do the same for this checkout, so that the timing is what an
    # installed stackctl costs even where PYTHONDONTWRITEBYTECODE is set (every run would compile from source).
    import compileall

    compileall.compile_dir(str(REPO / "stackctl"), quiet=1)
    baseline_cmd = [sys.executable, "-c", "pass"]
    validate_cmd = [sys.executable, "-m", "stackctl", "validate", args.recipe]
    if subprocess.run(validate_cmd, capture_output=True).returncode != 0:
        sys.exit(f"stackctl validate {args.recipe} failed; fix the recipe first")
    baseline, validate = [], []
    for _ in range(args.n):
        baseline.append(timed(baseline_cmd))
        validate.append(timed(validate_cmd))
    base_ms, val_ms = statistics.median(baseline) * 1000, statistics.median(validate) * 1000
    print(f"python3 -c pass          median {base_ms:7.1f} ms  (n={args.n})")
    print(f"stackctl validate RECIPE median {val_ms:7.1f} ms")
    print(f"ratio                    {val_ms / base_ms:7.2f}x  (target < 4x)")


if __name__ == "__main__":
    main()
