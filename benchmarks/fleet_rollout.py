"""Wall time of `stackctl fleet rollout` per phase on real hosts: N machine hosts (tests/integration/machine_hosts.py:
each its own Docker engine and network namespace), the cpu-smoke stack rolled out to them, the image built once on
this machine and shipped (docker save/load, or --registry). Prints the controller's phases (build, save or push), each
host's (ship, up, gate), the bytes shipped, and the build once against a build on every host: N times one build of
the same image, measured here with --no-cache when --measure-build is given (what each host would pay if it built
for itself; on ROCm the HIP compile of LMCache, 10-20 minutes on 2 cores).

    python benchmarks/fleet_rollout.py [--hosts 2] [--batch 1] [--measure-build]

Needs what .ci/run sets up (Docker engine, the fleet host image, ssh, ansible-runner). Leaves nothing running.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "tests" / "integration"), str(REPO / "tests")]

from fleet_hosts import build_wheelhouse, make_key  # noqa: E402
from machine_hosts import MachineHosts, ensure_image  # noqa: E402

RECIPE_CHANGE = ("port = 8000", 'port = 8000\nhost = "0.0.0.0"')


def stackctl(*args: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "stackctl", *args], cwd=REPO, env=env, capture_output=True,
                          text=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=2)
    parser.add_argument("--batch", default="1")
    parser.add_argument("--measure-build", action="store_true",
                        help="also time one build of the image from nothing (stackctl build --no-cache)")
    args = parser.parse_args()
    ensure_image()
    with tempfile.TemporaryDirectory(prefix="stackctl-fleet-bench-") as work:
        folder = Path(work)
        env = dict(os.environ, STACKCTL_STATE_DIR=str(folder / "state"))
        recipe = folder / "fleet.toml"
        recipe.write_text((REPO / "recipes" / "cpu-smoke.toml").read_text().replace(*RECIPE_CHANGE, 1))
        build_s = None
        if args.measure_build:
            started = time.monotonic()
            built = stackctl("build", str(recipe), "--no-cache", env=env)
            if built.returncode != 0:
                sys.exit(f"stackctl build failed: {built.stderr[-2000:]}")
            build_s = time.monotonic() - started
        hosts = MachineHosts(args.hosts, make_key(folder), folder / "machines")
        with hosts:
            inventory = hosts.inventory(folder / "hosts.ini")
            started = time.monotonic()
            result = stackctl("fleet", "rollout", str(recipe), "-i", str(inventory), "--batch", args.batch,
                              "--wheelhouse", str(build_wheelhouse(folder / "wheels")), "--format", "json", env=env)
            wall = time.monotonic() - started
        if result.returncode != 0:
            sys.exit(f"fleet rollout failed (exit {result.returncode}): {result.stderr[-3000:]}")
        summary = json.loads(result.stdout)
    header = summary
    images = header["images"]
    shipped = [h for h in summary["hosts"] if "ship" in h["phase_seconds"]]
    size = next(iter(images.values()))["size"] if images else 0
    print(f"fleet rollout of cpu-smoke to {args.hosts} host(s), batches of {args.batch}: {wall:.0f} s wall")
    print("controller: " + ", ".join(f"{name} {seconds:.0f} s" for name, seconds in header["phases"].items()))
    for host in summary["hosts"]:
        print(f"  {host['host']}: " + ", ".join(f"{name} {seconds:.0f} s"
                                               for name, seconds in host["phase_seconds"].items()))
    print(f"bytes shipped: {len(shipped)} x {size / 1e9:.2f} GB = {len(shipped) * size / 1e9:.2f} GB")
    if build_s is not None:
        print(f"build: once here {build_s:.0f} s; on every host instead: {args.hosts} x {build_s:.0f} s = "
              f"{args.hosts * build_s:.0f} s of host time, and {args.hosts} images nobody compared")


if __name__ == "__main__":
    main()
