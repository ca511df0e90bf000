"""The two lanes the suite runs in side by side (pytest-xdist, `-n 2 --dist loadgroup` in pyproject.toml): on 2
cores a lane spends much of its time waiting (a server starting, an image loading on a fleet host, ssh), and the
other lane uses that time. A lane runs its tests one at a time, in order (tests/conftest.py marks each test):

- "fleet": the fleet's own test hosts (containers named stackctl-fleet-host-N on ports 2221-2226, and
  stackctl-fleet-machine-N, each with its own Docker engine and network namespace) and the rollouts to them;
- "engine": every other test of this machine's Docker engine, its loopback ports, its Ceph RGW and the main job's
  stacks (session fixtures: one lane keeps each to one copy).

Unit and connector tests have no lane: each goes to whichever worker is free. A fault case counts the containers
that appear while it runs (tests/faults/faultkit.py): it leaves out the fleet lane's hosts by their names.
"""

from __future__ import annotations

FLEET_LANE = ("tests/faults/test_fleet_faults.py", "tests/integration/test_fleet.py",
              "tests/integration/test_fleet_machines.py")
ENGINE_FOLDERS = ("tests/faults/", "tests/integration/")
# Session fixtures of the engine lane: a fleet-lane module asking for one would start a second copy beside it.
ENGINE_LANE_FIXTURES = frozenset({"smoke_image", "smoke_job", "smoke_stack", "ceph_rgw", "tiers_env", "main_job",
                                  "lmcache_stack", "hip_env"})


def lane(nodeid: str) -> str | None:
    """The lane of a test, from its node id: "fleet", "engine", or None (any worker)."""
    path = nodeid.split("::")[0]
    if path in FLEET_LANE:
        return "fleet"
    return "engine" if path.startswith(ENGINE_FOLDERS) else None
