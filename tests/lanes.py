"""The two lanes the suite runs in side by side (pytest-xdist's two workers, `-n 2` in pyproject.toml): on 2 cores
a lane spends much of its time waiting (a server starting, an image loading on a fleet host, ssh), and the other
lane uses that time. A lane runs its tests on one worker, one at a time, in order (tests/conftest.py schedules them):

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


class LaneWorkers:
    """Which worker ran each lane. A lane on two workers would run its tests beside each other (two sets of fleet
    hosts under one name, two main jobs): the run stops at the first test that shows it."""

    def __init__(self) -> None:
        self.worker: dict[str, str] = {}

    def ran(self, nodeid: str, worker: str) -> str | None:
        """None while each lane stays on one worker, else what went wrong."""
        name = lane(nodeid)
        if name is None:
            return None
        first = self.worker.setdefault(name, worker)
        if first == worker:
            return None
        return f"the {name} lane ran on {first} and on {worker} ({nodeid}): its tests must run one at a time"
