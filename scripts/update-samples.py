#!/usr/bin/env python3
"""Rerun every figure stackctl ships, and write it where it is shown: README's sample outputs and bench-results/.

A sample is the output of a command, not text kept by hand: each one is rewritten here from a run on this machine
and stamped with the host, the date and the commit that produced it. Run it after the main job (`bash
scripts/smoke.sh`), which leaves the cpu-smoke and cpu-lmcache stacks running:

    python scripts/update-samples.py              # every sample
    python scripts/update-samples.py --only dtype # one (names: SAMPLES below)

The S3 tier's settings and keys come from the test store the main job started (/tmp/stackctl-ceph/s3.env), as the
main job itself reads them.

tests/unit/test_shipped_samples.py fails when a sample no longer matches what the shipped recipes prove (token counts,
check ids, column names) or carries no stamp.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
RESULTS = REPO / "bench-results"
LMCACHE = "recipes/cpu-lmcache.toml"
SMOKE = "recipes/cpu-smoke.toml"
# doctor's lines in README's LMCache sample; each is cut at this width (the rest is in `doctor --format json`)
LMCACHE_CHECKS = ("server.lmcache-hit", "server.lmcache-hit-correct", "server.tier-served", "server.hash-seed-proof")
WIDTH = 200
MARK = re.compile(r"<!-- sample (?P<name>[\w-]+): .*? -->\n```\n(?P<body>.*?)```\n", re.S)


def stamp() -> str:
    """"written by scripts/update-samples.py on <CPU> (2 cores, amx), 2026-11-28, commit abc1234"."""
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor() or platform.machine())
    flags = Path("/proc/cpuinfo").read_text()
    isa = "amx" if "amx_bf16" in flags else "avx512" if "avx512f" in flags else "avx2" if "avx2" in flags else "?"
    if os.environ.get("STACKCTL_CPU_ISA_CAP"):
        isa += f", capped to {os.environ['STACKCTL_CPU_ISA_CAP']}"
    commit = git("rev-parse", "--short", "HEAD")
    if git("status", "--porcelain", "--untracked-files=no", "--", ".", ":!README.md", ":!bench-results"):  # not ours
        commit += " with uncommitted changes"
    return (f"written by scripts/update-samples.py on {cpu} ({os.cpu_count()} cores, {isa}), "
            f"{datetime.date.today().isoformat()}, commit {commit}")


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()


def s3_settings() -> dict:
    """The main job's S3 store settings (KEY=VALUE lines), or nothing when it did not start one."""
    path = Path("/tmp/stackctl-ceph/s3.env")
    if not path.is_file():
        return {}
    pairs = (line.split("=", 1) for line in path.read_text().splitlines() if "=" in line and not line.startswith("#"))
    return {key.strip(): value.strip().strip("'\"") for key, value in pairs}


def stackctl(*args: str, env: dict | None = None) -> str:
    """stdout of `python -m stackctl ARGS`; a failure stops the script, naming the command (no sample is written)."""
    done = subprocess.run([sys.executable, "-m", "stackctl", *args], cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, **s3_settings(), **(env or {})}, timeout=1800)
    if done.returncode != 0:
        sys.exit(f"update-samples: stackctl {' '.join(args)} exited {done.returncode}: "
                 f"{(done.stderr or done.stdout).strip()[-600:]}")
    return done.stdout


def check_lines(output: str, ids: tuple[str, ...]) -> list[str]:
    """doctor's table lines for these check ids, in this order, each cut at WIDTH."""
    lines = {}
    for line in output.splitlines():
        words = line.split()
        if len(words) > 1 and words[1] in ids:
            lines[words[1]] = line if len(line) <= WIDTH else line[:WIDTH - 4] + " ..."
    missing = [check for check in ids if check not in lines]
    if missing:
        sys.exit(f"update-samples: doctor printed no line for {', '.join(missing)}")
    return [lines[check] for check in ids]


def lmcache_sample() -> str:
    """doctor --deep's LMCache lines and bench --probe's arms on the running cpu-lmcache stack."""
    doctor = stackctl("doctor", LMCACHE, "--deep", "--scope", "server")
    with tempfile.TemporaryDirectory() as out:  # probe.json and its plot: the sample is the printed table
        probe = stackctl("bench", LMCACHE, "--probe", "--tokens", "2000", "--runs", "5", "-o", out)
    table = [line for line in probe.splitlines() if line.startswith("|")]
    parts = [line for line in probe.splitlines() if line.startswith(("this host's", "  "))]
    return "\n".join(check_lines(doctor, LMCACHE_CHECKS) + [""] + table + parts) + "\n"


def dtype_sample() -> str:
    """doctor's dtype decision for cpu-smoke as on an AVX2-only CPU (the cap): what most cloud EPYC hosts get."""
    output = stackctl("doctor", SMOKE, "--scope", "host", "--fresh", env={"STACKCTL_CPU_ISA_CAP": "avx2"})
    return "\n".join(check_lines(output, ("host.cpu-dtype",))) + "\n"


def connector_result() -> None:
    """bench --connector on the running cpu-lmcache stack: bench-results/connector.json, stamped."""
    stackctl("bench", LMCACHE, "--connector", "-o", str(RESULTS))
    path = RESULTS / "connector.json"
    figures = json.loads(path.read_text())
    figures["written_by"] = stamp()
    path.write_text(json.dumps(figures, indent=2) + "\n")


# The load sweep bench-results/sweep/ holds: six load points around where the arms' KV cache overflows, eight turns per
# user (8 to 64 requests per point and arm: a median, its quartiles and its 90% interval), each point capped at 5
# minutes.
SWEEP = ("--sweep", "--sweep-users", "1,2,3,4,6,8", "--turns", "8", "--max-seconds", "300")


def sweep_result() -> None:
    """bench --sweep of the cpu-lmcache stack's image (HBM only against LMCache's CPU tier): bench-results/sweep/,
    the JSON and the Markdown stamped (the PNG is drawn from the same result)."""
    out = RESULTS / "sweep"
    stackctl("bench", LMCACHE, *SWEEP, "-o", str(out))
    figures = json.loads((out / "sweep.json").read_text())
    figures["written_by"] = stamp()
    (out / "sweep.json").write_text(json.dumps(figures, indent=2) + "\n")
    table = (out / "sweep.md").read_text()
    (out / "sweep.md").write_text(f"<!-- {figures['written_by']} -->\n{table}")


def write_readme_sample(name: str, body: str) -> None:
    text = README.read_text()
    found = [match for match in MARK.finditer(text) if match["name"] == name]
    if len(found) != 1:
        sys.exit(f"update-samples: README.md has {len(found)} '<!-- sample {name}: ... -->' blocks, wants one")
    match = found[0]
    block = f"<!-- sample {name}: {stamp()} -->\n```\n{body}```\n"
    README.write_text(text[:match.start()] + block + text[match.end():])


SAMPLES = {
    "lmcache": lambda: write_readme_sample("lmcache", lmcache_sample()),
    "dtype": lambda: write_readme_sample("dtype", dtype_sample()),
    "connector": connector_result,
    "sweep": sweep_result,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=sorted(SAMPLES), action="append")
    args = parser.parse_args()
    for name in args.only or SAMPLES:
        SAMPLES[name]()
        print(f"update-samples: {name} written")


if __name__ == "__main__":
    main()
