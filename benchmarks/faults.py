"""Run the fault-injection suite (tests/faults: real engine, real vLLM, real Ansible) and print its table: each
fault, the expected outcome, what was observed, orphaned containers (must be 0) and records lost (must be 0).

    python benchmarks/faults.py [-k EXPR]      # under the machine's Docker lock when the engine is shared

Exit status: pytest's (0 when every case passed).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def main(argv: list[str]) -> int:
    with tempfile.TemporaryDirectory(prefix="stackctl-faults-") as folder:
        report = Path(folder) / "faults.json"
        started = time.monotonic()
        result = subprocess.run([sys.executable, "-m", "pytest", "tests/faults", "-q", "-p", "no:cacheprovider",
                                 *argv], cwd=REPO, env={**_environ(), "STACKCTL_FAULTS_REPORT": str(report)})
        elapsed = time.monotonic() - started
        if not report.is_file():
            print(f"no faults report (pytest exit {result.returncode})", file=sys.stderr)
            return result.returncode or 1
        data = json.loads(report.read_text())
    print(table(data["rows"]))
    print(f"\n{len(data['rows'])} fault(s) in {elapsed:.0f} s; orphans {sum(r['orphans'] for r in data['rows'])}, "
          f"records lost {sum(r['records_lost'] for r in data['rows'])}; pytest exit {result.returncode}")
    for title, text in data.get("notes", {}).items():
        print(f"\n{title}:\n{text.rstrip()}")
    return result.returncode


def table(rows: list[dict]) -> str:
    header = ("FAULT", "EXPECTED", "OBSERVED", "ORPHANS", "RECORDS LOST")
    body = [(r["fault"], r["expected"], r["observed"], str(r["orphans"]), str(r["records_lost"])) for r in rows]
    widths = [max(len(row[i]) for row in [header, *body]) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip()
                     for row in [header, *body])


def _environ() -> dict:
    import os

    return dict(os.environ)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
