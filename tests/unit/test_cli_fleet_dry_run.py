"""`stackctl fleet rollout` through the real CLI up to the point where Ansible would run: the inventory read by the
real ansible-inventory, batches, each host's plan, and the option errors (one line, exit 1). --dry-run contacts no
host (the addresses are TEST-NET-1) and writes nothing; the rollout against real hosts is in
tests/integration/test_fleet.py."""

from __future__ import annotations

import json
import os

import pytest
from helpers import FIXTURES, RECIPES, run_cli

INVENTORY = "[fleet]\nnode-a ansible_host=192.0.2.1\nnode-b ansible_host=192.0.2.2\nnode-c ansible_host=192.0.2.3\n"


@pytest.fixture
def env(tmp_path):
    return dict(os.environ, STACKCTL_STATE_DIR=str(tmp_path / "state"))


@pytest.fixture
def inventory(tmp_path):
    path = tmp_path / "hosts.ini"
    path.write_text(INVENTORY)
    return path


def test_dry_run_prints_batches_and_each_hosts_plan_and_writes_nothing(inventory, env, tmp_path):
    result = run_cli("fleet", "rollout", "cpu-smoke", "-i", str(inventory), "--batch", "2", "--dry-run", env=env,
                     check=True)
    plan = json.loads(result.stdout)
    assert plan["batches"] == [["node-a", "node-b"], ["node-c"]]
    extravars = plan["runner"]["extravars"]
    assert extravars["stackctl_fleet_serial"] == 2 and extravars["stackctl_fleet_max_fail_percentage"] == 0
    hosts = extravars["stackctl_host_fleet_plan"]
    assert sorted(hosts) == ["node-a", "node-b", "node-c"]
    assert {h["recipe"] for h in hosts.values()} == {str(RECIPES / "cpu-smoke.toml")}
    assert {h["stack"] for h in hosts.values()} == {"cpu-smoke"}
    assert plan["runner"]["playbook"].endswith("playbooks/rollout.yml")
    assert plan["runner"]["inventory"] == str(inventory)
    assert not (tmp_path / "state").exists() or not any((tmp_path / "state").rglob("*"))


@pytest.mark.parametrize("args, error", [
    (["--allow-reboot"], "--allow-reboot only matters with --tune (fix: add --tune, or drop --allow-reboot)"),
    (["--batch", "zero"], "--batch: 'zero' is not a host count (> 0) or a percentage (1%-100%) (fix: e.g. "
                          "--batch 2 or --batch 25%)"),
    (["--skip", "host.cpu-governr"], None),
])
def test_option_errors_are_one_line(args, error, inventory, env):
    result = run_cli("fleet", "rollout", "cpu-smoke", "-i", str(inventory), "--dry-run", *args, env=env)
    assert result.returncode == 1 and result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("stackctl: ")
    if error:
        assert lines[0] == f"stackctl: {error}"
    else:
        assert "host.cpu-governr" in lines[0]


def test_an_inventory_without_hosts_is_refused(tmp_path, env):
    empty = tmp_path / "empty.ini"
    empty.write_text("[fleet]\n")
    result = run_cli("fleet", "rollout", "cpu-smoke", "-i", str(empty), "--dry-run", env=env)
    assert result.returncode == 1 and result.stderr == f"stackctl: {empty}: no hosts in the inventory\n"


def test_a_recipe_with_a_rule_error_is_refused_naming_the_host(inventory, env):
    failing = FIXTURES / "rules" / "atom-cuda-graphs" / "fail.toml"
    result = run_cli("fleet", "rollout", str(failing), "-i", str(inventory), "--dry-run", env=env)
    assert result.returncode == 1 and result.stdout == ""
    error = result.stderr.strip().splitlines()[-1]
    assert error.startswith("stackctl: host node-a: ") and "atom-cuda-graphs" in error
