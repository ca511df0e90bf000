"""The per-module coverage floor of CI: every module of the package must reach FLOOR percent, as coverage.py counts
it with branch = true ("percent covered": statements and branches together) and as `coverage report` shows it,
rounded to the report's precision (coverage.py's own --fail-under judges the rounded total too): a module the
table shows at 80% passes a floor of 80.

Reads the output of `coverage json`; prints the modules under the floor, lowest first, and exits 1 when there is
any (or when the report holds no module of the package at all). .ci/run runs it after the coverage table.

Usage: python scripts/coverage_floor.py COVERAGE_JSON [--floor 80] [--package stackctl]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path, PurePosixPath


def package_modules(report: dict, package: str) -> dict[str, float]:
    """Percent covered of each module of `package` in a `coverage json` report, by path, as the table shows it."""
    return {path: _shown(data["summary"]) for path, data in report.get("files", {}).items()
            if package in PurePosixPath(path.replace("\\", "/")).parts}


def _shown(summary: dict) -> float:
    try:
        return float(summary["percent_covered_display"])
    except (KeyError, ValueError):
        return float(summary["percent_covered"])


def modules_under(modules: dict[str, float], floor: float) -> list[tuple[str, float]]:
    """The modules under the floor, lowest coverage first (then by path)."""
    return sorted(((path, percent) for path, percent in modules.items() if percent < floor),
                  key=lambda item: (item[1], item[0]))


def verdict(modules: dict[str, float], floor: float, package: str) -> tuple[bool, list[str]]:
    """(passed, lines to print)."""
    if not modules:
        return False, [f"coverage floor: no module of {package} in the coverage report (was coverage measured?)"]
    under = modules_under(modules, floor)
    if not under:
        return True, [f"coverage floor {floor:g}%: all {len(modules)} {package} modules reach it"]
    lines = [f"coverage floor {floor:g}%: {len(under)} {package} module(s) under it (fix: tests that run the "
             "missing lines and branches; `coverage report --show-missing --include=PATH` lists them)"]
    lines += [f"  {path:<50} {percent:5g}%" for path, percent in under]
    return False, lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", help="output of `coverage json`")
    parser.add_argument("--floor", type=float, default=80.0, help="lowest percent covered a module may have")
    parser.add_argument("--package", default="stackctl", help="the package whose modules are held to the floor")
    args = parser.parse_args(argv)
    try:
        report = json.loads(Path(args.report).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        print(f"coverage floor: cannot read {args.report}: {exc} (fix: run `coverage json -o {args.report}` first)")
        return 1
    passed, lines = verdict(package_modules(report, args.package), args.floor, args.package)
    print("\n".join(lines))
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
