"""The lanes the suite runs in side by side (tests/lanes.py): every integration and fault module has one, and a
fleet-lane module asks for none of the engine lane's session fixtures (a second main job or Ceph RGW would start
beside the first) and takes its sshd hosts' ports from the fleet lane's range."""

from __future__ import annotations

import ast
import re

from helpers import REPO
from lanes import ENGINE_FOLDERS, ENGINE_LANE_FIXTURES, FLEET_LANE, LaneWorkers, lane


def _modules(folder: str) -> list[str]:
    return sorted(str(path.relative_to(REPO)) for path in (REPO / folder).glob("test_*.py"))


def _fixtures_asked(path: str) -> set[str]:
    tree = ast.parse((REPO / path).read_text())
    return {arg.arg for node in ast.walk(tree) if isinstance(node, ast.FunctionDef) for arg in node.args.args}


def test_every_module_of_the_engine_using_folders_has_a_lane_and_unit_tests_none():
    modules = [path for folder in ENGINE_FOLDERS for path in _modules(folder)]
    assert modules and all(lane(f"{path}::test_x") in ("fleet", "engine") for path in modules)
    assert set(FLEET_LANE) <= set(modules), set(FLEET_LANE) - set(modules)  # no lane names a module that is gone
    assert lane("tests/unit/test_kinds.py::test_x") is None and lane("connector/tests/test_native.py::t") is None


def test_the_fleet_lane_asks_for_none_of_the_engine_lanes_session_fixtures():
    for path in FLEET_LANE:
        assert not _fixtures_asked(path) & ENGINE_LANE_FIXTURES, path


def test_sshd_hosts_take_their_lanes_ports():
    """Fleet-lane hosts on 2221-2226, engine-lane ones on 2227-2229 (each FleetHosts is named by its port)."""
    for folder in ENGINE_FOLDERS:
        for path in _modules(folder):
            text = (REPO / path).read_text()
            if "FleetHosts(" not in text:
                continue
            ports = [int(port) for port in re.findall(r"(?:first_port=|FIRST_PORT = )(\d+)", text)] or [2221]
            allowed = range(2221, 2225) if lane(f"{path}::t") == "fleet" else range(2227, 2228)
            assert all(port in allowed for port in ports), (path, ports)


def test_a_lane_seen_on_a_second_worker_is_named_and_tests_without_a_lane_go_anywhere():
    workers = LaneWorkers()
    assert workers.ran("tests/integration/test_fleet.py::test_a", "gw1") is None
    assert workers.ran("tests/integration/test_stack.py::test_b", "gw0") is None
    assert workers.ran("tests/unit/test_ids.py::test_c", "gw1") is None
    assert workers.ran("tests/unit/test_ids.py::test_d", "gw0") is None
    assert workers.ran("tests/faults/test_fleet_faults.py::test_e", "gw1") is None
    problem = workers.ran("tests/integration/test_fleet_machines.py::test_f", "gw0")
    assert problem == ("the fleet lane ran on gw1 and on gw0 (tests/integration/test_fleet_machines.py::test_f): its "
                       "tests must run one at a time")
