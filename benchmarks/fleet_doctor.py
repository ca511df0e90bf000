"""Wall time of `stackctl fleet doctor` on 1 host and on 3 hosts, and their ratio. Hosts are checked in parallel
(one Ansible fork per host), so 3 hosts should cost little more than 1.

The hosts are real: sshd containers (scripts/make-sshd-image.sh) on 127.0.0.1:2221-2223 with host networking, real
SSH and ansible-core. A `stackctl fleet rollout --skip-up` installs stackctl on them first (not timed).
Usage: python benchmarks/fleet_doctor.py [-n RUNS]. Needs Docker, the base image, ssh and ansible-core."""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "tests"), str(REPO / "tests" / "integration")]

from fleet_hosts import (  # noqa: E402
    FleetHosts,
    build_wheelhouse,
    ensure_image,
    fleet_unavailable,
    make_key,
)

DOCTOR_ARGS = ["--scope", "host", "--skip", "host.docker-engine", "--format", "json"]


def stackctl(*args: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "stackctl", *args], capture_output=True, text=True, env=env,
                          timeout=1800)


def time_doctor(inventory: Path, runs: int, env: dict) -> list[float]:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        result = stackctl("fleet", "doctor", "cpu-smoke", "-i", str(inventory), *DOCTOR_ARGS, env=env)
        times.append(time.perf_counter() - started)
        if result.returncode != 0:
            sys.exit(f"fleet doctor failed ({result.returncode}):\n{result.stdout}\n{result.stderr[-3000:]}")
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--runs", type=int, default=3, help="timed runs per fleet size (median reported)")
    args = parser.parse_args()
    reason = fleet_unavailable()
    if reason:
        sys.exit(f"cannot run: {reason}")
    ensure_image()
    with tempfile.TemporaryDirectory(prefix="stackctl-fleet-bench-") as tmp:
        work = Path(tmp)
        env = dict(os.environ, STACKCTL_STATE_DIR=str(work / "state"))
        with FleetHosts(3, make_key(work)) as hosts:
            all_hosts = hosts.inventory(work / "three.ini")
            one_host = hosts.inventory(work / "one.ini", hosts=hosts.hosts[:1])
            wheelhouse = build_wheelhouse(work / "wheelhouse")
            setup = stackctl("fleet", "rollout", "cpu-smoke", "-i", str(all_hosts), "--skip-up", "--wheelhouse",
                             str(wheelhouse), env=env)
            if setup.returncode != 0:
                sys.exit(f"rollout (setup) failed:\n{setup.stdout}\n{setup.stderr[-3000:]}")
            one = time_doctor(one_host, args.runs, env)
            three = time_doctor(all_hosts, args.runs, env)
    m1, m3 = statistics.median(one), statistics.median(three)
    print(f"fleet doctor, 1 host:  median {m1:.2f} s (min {min(one):.2f}, max {max(one):.2f}, {args.runs} runs)")
    print(f"fleet doctor, 3 hosts: median {m3:.2f} s (min {min(three):.2f}, max {max(three):.2f}, {args.runs} runs)")
    print(f"ratio 3 hosts / 1 host: {m3 / m1:.2f} (3.00 would mean one host after another)")


if __name__ == "__main__":
    main()
