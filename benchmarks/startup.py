"""Cold start of `stackctl validate RECIPE` as a ratio of `python -c pass` (target: under 3x).

Runs the commands N times interleaved and compares medians, so machine noise hits every side alike; prints the
wall-time medians and their ratio, the CPU-time ratio (steadier on a busy machine), and the floor no code of
stackctl's can go under: the same interpreter parsing the recipe with stackctl's TOML parser alone (tomli, else
tomllib). The package's bytecode is compiled first, as `pip install` does.
Usage: python benchmarks/startup.py [RECIPE] [-n N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TARGET = 3.0


def timed(argv: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the child: user + system)."""
    start = time.perf_counter()
    child = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO)
    _, _, usage = os.wait4(child.pid, 0)
    return time.perf_counter() - start, usage.ru_utime + usage.ru_stime


def toml_parser_module() -> str:
    """The module stackctl parses TOML with (stackctl/toml_parser.py): tomli where installed, else tomllib."""
    sys.path.insert(0, str(REPO))
    from stackctl import toml_parser

    return toml_parser.loads.__module__.split(".")[0]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("recipe", nargs="?", default=str(REPO / "recipes" / "cpu-lmcache.toml"))
    parser.add_argument("-n", type=int, default=21)
    args = parser.parse_args()
    recipe = str(Path(args.recipe).resolve())
    # pip writes bytecode when it installs a package; do the same for this checkout, so that the timing is what an
    # installed stackctl costs even where PYTHONDONTWRITEBYTECODE is set (every run would compile from source).
    import compileall

    compileall.compile_dir(str(REPO / "stackctl"), quiet=1)
    toml_module = toml_parser_module()
    commands = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "stackctl validate RECIPE": [sys.executable, "-m", "stackctl", "validate", recipe],
        "TOML parse (floor)": [sys.executable, "-c", f"import {toml_module}; {toml_module}.loads(open({recipe!r}).read())"],
    }
    if subprocess.run(commands["stackctl validate RECIPE"], capture_output=True, cwd=REPO).returncode != 0:
        sys.exit(f"stackctl validate {args.recipe} failed; fix the recipe first")
    wall: dict[str, list[float]] = {name: [] for name in commands}
    cpu: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(args.n):
        for name, argv in commands.items():
            seconds, cpu_seconds = timed(argv)
            wall[name].append(seconds)
            cpu[name].append(cpu_seconds)
    base_wall, base_cpu = statistics.median(wall["python -c pass"]), statistics.median(cpu["python -c pass"])
    for name in commands:
        median_wall, median_cpu = statistics.median(wall[name]), statistics.median(cpu[name])
        print(f"{name:26} median {median_wall * 1000:7.1f} ms  {median_wall / base_wall:5.2f}x   "
              f"CPU {median_cpu * 1000:6.1f} ms  {median_cpu / base_cpu:5.2f}x  (n={args.n})")
    ratio = statistics.median(wall["stackctl validate RECIPE"]) / base_wall
    print(f"ratio {ratio:.2f}x (target < {TARGET:g}x)")


if __name__ == "__main__":
    main()
