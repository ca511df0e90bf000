"""`stackctl fleet` against real hosts: three sshd containers (host networking, 127.0.0.1:2221-2223), real SSH with
a key made for the run, real ansible-core through ansible-runner. The hosts have no Docker, so rollouts take the
doctor-only path (--skip-up) with the cpu-smoke recipe."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from fleet_hosts import (
    FleetHosts,
    ansible_unavailable,
    build_wheelhouse,
    ensure_image,
    fleet_unavailable,
    make_key,
)
from helpers import RECIPES, run_cli
from stacks import variant

from stackctl.bundle.stackspec import recipe_hash
from stackctl.recipe import load_recipe

needs_ansible = pytest.mark.skipif(ansible_unavailable() is not None, reason=str(ansible_unavailable()))

# A cpu tier far above any test machine's RAM: host.cpu-tier-ram fails on that host.
TOO_BIG = {
    'vllm = "0.32.0"': 'vllm = "0.32.0"\nlmcache = "0.5.6"',
    "[cache]\nenabled = false": "[cache]\nenabled = true",
    "[host]": '[[cache.tiers]]\nkind = "cpu"\nsize_gb = 65536\n\n[host]',
}


@pytest.fixture(scope="session")
def fleet_ready():
    reason = fleet_unavailable()
    if reason:
        pytest.skip(reason)
    ensure_image()


@pytest.fixture(scope="session")
def ssh_key(tmp_path_factory):
    return make_key(tmp_path_factory.mktemp("ssh"))


@pytest.fixture(scope="session")
def wheelhouse(fleet_ready, tmp_path_factory):
    return build_wheelhouse(tmp_path_factory.mktemp("wheelhouse"))


@pytest.fixture
def fleet3(fleet_ready, ssh_key):
    hosts = FleetHosts(3, ssh_key)
    hosts.start()
    try:
        yield hosts
    finally:
        hosts.remove()


@pytest.fixture
def env(tmp_path):
    environment = dict(os.environ)
    environment["STACKCTL_STATE_DIR"] = str(tmp_path / "state")
    return environment


def _fleet(env, *args, timeout=900):
    return run_cli("fleet", *args, env=env, timeout=timeout)


@pytest.mark.docker
@pytest.mark.ansible
def test_rollout_reports_every_host_is_idempotent_and_fleet_doctor_passes(fleet3, env, tmp_path):
    inventory = fleet3.inventory(tmp_path / "hosts.ini")
    expected = recipe_hash(load_recipe(RECIPES / "cpu-smoke.toml"))

    # No --wheelhouse: stackctl builds one from its own source tree (pip wheel), as a user's first rollout does.
    first = _fleet(env, "rollout", "cpu-smoke", "-i", str(inventory), "--skip-up", "--batch", "2", "--tune",
                   "--format", "json")
    assert first.returncode == 0, first.stdout + first.stderr[-4000:]
    report = json.loads(first.stdout)
    assert report["batches"] == [["host-1", "host-2"], ["host-3"]]
    assert report["summary"]["changed"] == 3 and report["recipes"] == {expected: ["host-1", "host-2", "host-3"]}
    for host in report["hosts"]:
        assert host["status"] == "changed" and host["recipe_hash"] == expected, host
        assert host["doctor_phase"] == "gate" and host["doctor_summary"]["fail"] == 0
    # Live progress: one line per host and task as results arrive.
    assert re.search(r"host-3\s+changed\s+Run pip install \(no index\)", first.stderr)
    assert "batch 2/2: host-3" in first.stderr

    for host in fleet3.hosts:
        record = json.loads(fleet3.read(host, "/opt/stackctl/rollout.json"))
        assert record["recipe_hash"] == expected and record["stack_started"] is False
        assert fleet3.read(host, "/etc/sysctl.d/90-stackctl.conf").strip().endswith("kernel.numa_balancing = 0")
        controller_record = json.loads((Path(report["artifacts"]) / f"{host}.json").read_text())
        assert controller_record["outcome"] == "ok" and controller_record["recipe_hash"] == expected
        assert controller_record["preflight"]["summary"]["fail"] == 0

    # The same rollout again changes nothing on any host (same wheels: the source tree may change meanwhile).
    built = Path(report["artifacts"]).parent / "wheelhouse"
    again = _fleet(env, "rollout", "cpu-smoke", "-i", str(inventory), "--skip-up", "--batch", "2", "--tune",
                   "--wheelhouse", str(built))
    assert again.returncode == 0, again.stdout + again.stderr[-4000:]
    rows = {line.split()[0]: line for line in again.stdout.splitlines() if line.startswith("host-")}
    for host in fleet3.hosts:
        assert re.match(rf"{host}\s+\d\s+ok\s+{expected}\s+0 change\(s\)", rows[host]), rows[host]
    assert f"recipe {expected}: host-1, host-2, host-3" in again.stdout

    # Fleet doctor: every host checked, nothing changed, each host's recorded recipe reported.
    checked = _fleet(env, "doctor", "cpu-smoke", "-i", str(inventory), "--scope", "host",
                     "--skip", "host.docker-engine", "--format", "json")
    assert checked.returncode == 0, checked.stdout + checked.stderr[-4000:]
    doctor_report = json.loads(checked.stdout)
    assert [h["status"] for h in doctor_report["hosts"]] == ["ok", "ok", "ok"]
    assert doctor_report["recipes"] == {expected: ["host-1", "host-2", "host-3"]}
    assert all(h["doctor_summary"]["pass"] > 0 for h in doctor_report["hosts"])
    # Where each host's server runs: host scope only, so the decision (no GPU on these hosts: not pinned).
    assert [h["placement"] for h in doctor_report["hosts"]] == ["not pinned (decided)"] * 3
    assert fleet3.ssh("host-1", "ls /tmp/*.toml 2>/dev/null | wc -l").stdout.strip() == "0"  # temp recipe removed

    # isolcpus goes on the kernel command line through GRUB drop-ins; a host without them is refused clearly, and
    # nothing reboots without --allow-reboot.
    variant(tmp_path, "isolated.toml", {'isolcpus = "auto"': 'isolcpus = "1"'})
    one = fleet3.inventory(tmp_path / "one.ini", hosts=["host-1"], host_vars={"host-1": {
        "stackctl_recipe": "isolated.toml"}})
    refused = _fleet(env, "rollout", "-i", str(one), "--skip-up", "--tune", "--format", "json")
    assert refused.returncode == 1, refused.stdout + refused.stderr[-4000:]
    (host,) = json.loads(refused.stdout)["hosts"]
    assert host["status"] == "failed" and host["failed_task"] == "Refuse isolcpus without GRUB drop-ins"
    assert "isolcpus: /etc/default/grub.d is missing" in host["message"]
    assert json.loads(fleet3.read("host-1", "/opt/stackctl/rollout.json"))["recipe_hash"] == expected


@pytest.mark.docker
@pytest.mark.ansible
def test_a_host_failing_preflight_stops_the_rollout_and_later_hosts_are_untouched(fleet3, env, tmp_path,
                                                                                   wheelhouse):
    variant(tmp_path, "too-big.toml", TOO_BIG)
    # host-2 gets its own recipe from the inventory (a path relative to the inventory).
    inventory = fleet3.inventory(tmp_path / "hosts.ini", host_vars={"host-2": {"stackctl_recipe": "too-big.toml"}})
    expected = recipe_hash(load_recipe(RECIPES / "cpu-smoke.toml"))

    result = _fleet(env, "rollout", "cpu-smoke", "-i", str(inventory), "--skip-up", "--batch", "1",
                    "--wheelhouse", str(wheelhouse))
    assert result.returncode == 1, result.stdout + result.stderr[-4000:]
    rows = {line.split()[0]: line for line in result.stdout.splitlines() if line.startswith("host-")}
    assert re.match(rf"host-1\s+1\s+changed\s+{expected}\s", rows["host-1"]), rows["host-1"]
    assert re.match(r"host-2\s+2\s+failed\s+unchanged\s+preflight: host\.cpu-tier-ram: CPU tier 65536\.0 GiB",
                    rows["host-2"]), rows["host-2"]
    assert re.match(r"host-3\s+3\s+not reached\s+unchanged\s", rows["host-3"]), rows["host-3"]
    assert f"recipe {expected}: host-1" in result.stdout
    assert "unchanged (previous recipe, untouched): host-2, host-3" in result.stdout
    assert re.search(r"host-2\s+FAILED\s+Stop when a preflight check failed: .*host\.cpu-tier-ram", result.stderr)

    # host-3 was never touched: nothing installed, no recipe, no record. host-2 kept no record of the new recipe.
    assert fleet3.exists("host-1", "/opt/stackctl/rollout.json")
    assert not fleet3.exists("host-3", "/opt/stackctl")
    assert not fleet3.exists("host-2", "/opt/stackctl/rollout.json")
    artifacts = Path(re.search(r"records in (\S+)", result.stdout).group(1))
    failed = json.loads((artifacts / "host-2.json").read_text())
    assert failed["outcome"] == "failed" and failed["gate"] is None
    assert [r["id"] for r in failed["preflight"]["results"] if r["status"] == "fail"] == ["host.cpu-tier-ram"]
    assert not (artifacts / "host-3.json").exists()


@needs_ansible
@pytest.mark.ansible
def test_hosts_sharing_a_remote_tier_must_agree_before_anything_changes(tmp_path, env):
    # Nothing listens on these addresses: the refusal must come before any connection.
    variant(tmp_path, "chunk512.toml", {"chunk_size = 256": "chunk_size = 512"}, base="vllm-lmcache-s3.toml")
    inventory = tmp_path / "hosts.ini"
    inventory.write_text("[gpu]\nnode-a ansible_host=192.0.2.10\nnode-b ansible_host=192.0.2.11\n"
                         "node-c ansible_host=192.0.2.12 stackctl_recipe=chunk512.toml\n")
    result = _fleet(env, "rollout", str(RECIPES / "vllm-lmcache-s3.toml"), "-i", str(inventory), timeout=120)
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("stackctl: hosts sharing the s3 s3://kvcache.rgw.example.com:7480 tier disagree "
                                    "on cache.chunk_size: 256 on node-a, node-b; 512 on node-c")
    assert not (tmp_path / "state" / "_fleet").exists()  # no run was even prepared


@needs_ansible
@pytest.mark.ansible
def test_dry_run_prints_batches_and_runner_arguments(tmp_path, env):
    inventory = tmp_path / "hosts.ini"
    inventory.write_text("[fleet]\n" + "".join(f"n{i} ansible_host=192.0.2.{i}\n" for i in range(1, 5)))
    result = _fleet(env, "rollout", "cpu-smoke", "-i", str(inventory), "--batch", "50%", "--max-fail", "25%",
                    "--dry-run", timeout=120)
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert plan["batches"] == [["n1", "n2"], ["n3", "n4"]]
    runner = plan["runner"]
    assert runner["playbook"].endswith("playbooks/rollout.yml") and runner["forks"] == 4
    extra = runner["extravars"]
    assert extra["stackctl_fleet_serial"] == "50%" and extra["stackctl_fleet_max_fail_percentage"] == 25
    assert set(extra["stackctl_host_fleet_plan"]) == {"n1", "n2", "n3", "n4"}
    assert extra["stackctl_host_fleet_plan"]["n1"]["recipe_hash"] == recipe_hash(load_recipe(RECIPES /
                                                                                            "cpu-smoke.toml"))


@needs_ansible
@pytest.mark.ansible
def test_unreachable_hosts_are_reported(tmp_path, env):
    # Port 2229 in the fleet range, with nothing listening: a real SSH connection refused.
    inventory = tmp_path / "hosts.ini"
    inventory.write_text("gone ansible_host=127.0.0.1 ansible_port=2229 ansible_user=root\n")
    result = _fleet(env, "doctor", "cpu-smoke", "-i", str(inventory), "--format", "json", timeout=300)
    assert result.returncode == 1, result.stderr
    (host,) = json.loads(result.stdout)["hosts"]
    assert host["status"] == "unreachable" and "ssh" in host["message"].lower()
