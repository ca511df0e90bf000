"""Fleet faults against real hosts (sshd containers, real SSH and Ansible; --skip-up: the hosts have no Docker): a
host failing its checks with --rollback-on-fail goes back to its previous recipe; a host whose sshd stops in the
middle of a rollout stops the rollout, later batches stay untouched and every record is kept; a dry run writes
nothing."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from fleet_hosts import (
    FleetHosts,
    build_wheelhouse,
    ensure_image,
    fleet_unavailable,
    make_key,
)
from helpers import run_cli
from stacks import variant

from stackctl.recipe import load_recipe
from stackctl.bundle.stackspec import recipe_hash

pytestmark = [pytest.mark.docker, pytest.mark.ansible, pytest.mark.slow]

# A cpu tier far above any test machine's RAM: the host check host.cpu-tier-ram fails on every host.
TOO_BIG = {
    'vllm = "0.32.0"': 'vllm = "0.32.0"\nlmcache = "0.5.6"',
    "[cache]\nenabled = false": "[cache]\nenabled = true",
    "[host]": '[[cache.tiers]]\nkind = "cpu"\nsize_gb = 65536\n\n[host]',
}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    reason = fleet_unavailable()
    if reason:
        pytest.skip(reason)
    ensure_image()
    folder = tmp_path_factory.mktemp("fleet-faults")
    hosts = FleetHosts(3, make_key(folder), first_port=2224)
    hosts.start()
    try:
        yield hosts, build_wheelhouse(folder / "wheelhouse")
    finally:
        hosts.remove()


@pytest.fixture(scope="module")
def rolled_out(fleet, fault_env, tmp_path_factory):
    """Every host on recipe `first` (the previous recipe of the cases below)."""
    hosts, wheelhouse = fleet
    folder = tmp_path_factory.mktemp("fleet-recipes")
    first = variant(folder, "fleet-first", {'name = "cpu-smoke"': 'name = "faults-fleet"'})
    inventory = hosts.inventory(folder / "hosts.ini")
    result = run_cli("fleet", "rollout", str(first), "-i", str(inventory), "--skip-up", "--wheelhouse",
                     str(wheelhouse), env=fault_env, timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr[-4000:]
    return {"first": first, "inventory": inventory, "folder": folder, "hash": recipe_hash(load_recipe(first))}


def _records(env: dict) -> dict:
    folder = Path(env["STACKCTL_STATE_DIR"]) / "_fleet" / "hosts"
    return {p.stem: json.loads(p.read_text())[-1] for p in folder.glob("*.json")}


def test_gate_failure_with_rollback_on_fail_returns_the_host_to_its_previous_recipe(fleet, rolled_out, fault_env,
                                                                                    fault_report):
    hosts, wheelhouse = fleet
    folder = rolled_out["folder"]
    bad = variant(folder, "fleet-too-big", {'name = "cpu-smoke"': 'name = "faults-fleet"', **TOO_BIG})
    one = hosts.inventory(folder / "one.ini", hosts=["host-1"])

    result = run_cli("fleet", "rollout", str(bad), "-i", str(one), "--skip-up", "--rollback-on-fail",
                     "--wheelhouse", str(wheelhouse), env=fault_env, timeout=900)

    assert result.returncode == 1, result.stdout + result.stderr[-4000:]
    row = next(line for line in result.stdout.splitlines() if line.startswith("host-1"))
    assert row.split()[2:4] == ["rolled", "back"] and rolled_out["hash"] in row and "host.cpu-tier-ram" in row
    assert "result: rolled back host-1" in result.stdout
    on_host = json.loads(hosts.read("host-1", "/opt/stackctl/rollout.json"))
    assert on_host["recipe_hash"] == rolled_out["hash"]  # the host's record: still the previous recipe
    assert hosts.read("host-1", on_host["recipe"]) == Path(rolled_out["first"]).read_text()  # and its file
    assert not hosts.exists("host-1", "/opt/stackctl/recipes/fleet-too-big.toml")
    record = _records(fault_env)["host-1"]
    lost = [] if record["outcome"] == "rolled back" and record["previous_recipe_hash"] == rolled_out["hash"] \
        else ["controller record of host-1"]
    fault_report.add("fleet gate failure with --rollback-on-fail", "host back on its previous recipe; table says so",
                     f"exit {result.returncode}; host-1 rolled back to {rolled_out['hash']}", [], lost)
    assert lost == []


def test_sshd_stopping_mid_rollout_stops_it_and_keeps_every_record(fleet, rolled_out, fault_env, background,
                                                                   fault_report):
    hosts, wheelhouse = fleet
    second = variant(rolled_out["folder"], "fleet-second", {'name = "cpu-smoke"': 'name = "faults-fleet"',
                                                            "HBM-equivalent": "HBM-equivalent (second)"})
    state = Path(fault_env["STACKCTL_STATE_DIR"])
    before = sorted((str(p), p.stat().st_mtime_ns) for p in state.rglob("*"))

    dry = run_cli("fleet", "rollout", str(second), "-i", str(rolled_out["inventory"]), "--skip-up", "--batch", "1",
                  "--dry-run", env=fault_env, timeout=300)
    assert dry.returncode == 0, dry.stderr
    assert sorted((str(p), p.stat().st_mtime_ns) for p in state.rglob("*")) == before  # a dry run writes nothing

    job = background(["fleet", "rollout", str(second), "-i", str(rolled_out["inventory"]), "--skip-up", "--batch",
                      "1", "--wheelhouse", str(wheelhouse)], fault_env)
    job.wait_for("batch 2/3: host-2", timeout=900)
    subprocess.run(["docker", "kill", hosts.containers["host-2"]], check=True, capture_output=True)
    rc, output = job.finish(timeout=900)

    assert rc == 1, output
    new_hash = recipe_hash(load_recipe(second))
    rows = {line.split()[0]: line for line in output.splitlines() if line.startswith("host-")}
    assert new_hash in rows["host-1"] and "unreachable" in rows["host-2"] and "not reached" in rows["host-3"]
    assert json.loads(hosts.read("host-3", "/opt/stackctl/rollout.json"))["recipe_hash"] == rolled_out["hash"]
    records = _records(fault_env)
    lost = [f"record of {h}" for h in ("host-1", "host-2", "host-3") if h not in records]
    if records.get("host-1", {}).get("recipe_hash") != new_hash:
        lost.append("host-1's new record")
    if records.get("host-3", {}).get("recipe_hash") != rolled_out["hash"]:
        lost.append("host-3's earlier record")
    fault_report.add("fleet host's sshd stops mid-rollout", "rollout stops; later batches untouched; records kept",
                     f"exit {rc}; host-1 new, host-2 unreachable, host-3 untouched", [], lost)
    fault_report.add("fleet rollout --dry-run", "writes nothing", "state dir unchanged", [], [])
    assert lost == []
