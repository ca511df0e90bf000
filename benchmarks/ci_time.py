"""Where CI's time goes, from the output of one `bash .ci/run`: each set-up phase, each test folder, and the test
files and tests that took longest (pytest's --durations lines, setup and teardown included: a module fixture that
starts a stack is paid by the first test that asks for it).

    CI=true bash .ci/run 2>&1 | tee /tmp/ci.log
    python benchmarks/ci_time.py /tmp/ci.log [--top 15]

CI has 5,400 s before nothing lands, and a fresh machine should pass in 3,600 s; the figures say what to make room
in first. A phase that ran in the background (the HIP build beside the tests) and each test folder's share of the
pytest phase are listed but not added to the wall time: the total is the one scripts/phases.sh printed.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import defaultdict
from pathlib import Path

BUDGET_S = 5400
TARGET_S = 3600
BACKGROUND = "(in the background)"
INSIDE_PYTEST = "(test time, inside the pytest phase)"  # a test folder's share of the pytest phase: not added
PHASE = re.compile(r"^\s*([\d,]+) s\s+(?:\d+%\s+)?(.+)$")  # the "wall time per phase" block of scripts/phases.sh
DURATION = re.compile(r"^([\d.]+)s (setup|call|teardown)\s+(\S+?)::(\S+)")


def phases(log: str) -> tuple[list[tuple[str, int]], int]:
    """The phase block printed last (each phase once, in order) and its wall time: phases.sh's own total line, or
    the sum of the phases that did not run in the background when a log lacks that line."""
    block = log.rsplit("==> wall time per phase", 1)
    if len(block) < 2:
        return [], 0
    found = [(m[2].strip(), int(m[1].replace(",", ""))) for line in block[1].splitlines() if (m := PHASE.match(line))]
    listed = [(name, seconds) for name, seconds in found if name != "total"]
    totals = [seconds for name, seconds in found if name == "total"]
    wall = totals[-1] if totals else sum(seconds for name, seconds in listed
                                         if BACKGROUND not in name and INSIDE_PYTEST not in name)
    return listed, wall


def durations(log: str) -> dict[tuple[str, str], float]:
    """Seconds per (file, test), setup, call and teardown added up, from pytest's slowest-durations list."""
    seen: dict[tuple[str, str], float] = defaultdict(float)
    for line in log.splitlines():
        if match := DURATION.match(line.strip()):
            seen[(match[3], match[4])] += float(match[1])
    return seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log", type=Path)
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()
    log = args.log.read_text(errors="replace")
    found, wall = phases(log)
    if not found:
        sys.exit(f"{args.log}: no 'wall time per phase' block (did .ci/run finish?)")
    print(f"CI wall time {wall:,} s: {wall / BUDGET_S:.0%} of the {BUDGET_S:,} s after which nothing lands, "
          f"{wall / TARGET_S:.0%} of the {TARGET_S:,} s target")
    for name, seconds in found:
        print(f"  {seconds:6,} s  {seconds / wall:4.0%}  {name}")
    tests = durations(log)
    if not tests:
        print("no pytest durations in the log (pytest runs with --durations=N in pyproject.toml)")
        return
    per_file: dict[str, float] = defaultdict(float)
    for (path, _), seconds in tests.items():
        per_file[path] += seconds
    print(f"\nslowest test files (of the {len(tests)} slowest tests pytest listed):")
    for path, seconds in sorted(per_file.items(), key=lambda item: -item[1])[:args.top]:
        print(f"  {seconds:7,.0f} s  {path}")
    print("\nslowest tests:")
    for (path, test), seconds in sorted(tests.items(), key=lambda item: -item[1])[:args.top]:
        print(f"  {seconds:7,.0f} s  {path}::{test}")


if __name__ == "__main__":
    main()
