"""Fleet doctor proves a shared fs tier is shared: three sshd hosts with the same fs tier path, where host-1 and
host-2 mount the same host directory there and host-3 a directory of its own. One host writes a marker, every other
host of the group must read it: host-3 fails, naming the tier and the writer; no marker is left behind."""

from __future__ import annotations

import json

import pytest
from fleet_hosts import FleetHosts
from helpers import run_cli
from test_fleet import _variant, env, fleet_ready, ssh_key, wheelhouse  # noqa: F401  (shared fixtures)

SHARED_FS = {
    'vllm = "0.32.0"': 'vllm = "0.32.0"\nlmcache = "0.5.6"',
    "[cache]\nenabled = false": "[cache]\nenabled = true",
    "[host]": '[[cache.tiers]]\nkind = "cpu"\nsize_gb = 1\n\n[[cache.tiers]]\nkind = "fs"\npath = "/shared/kv"\n\n[host]',
}


@pytest.mark.docker
@pytest.mark.ansible
def test_fleet_doctor_proves_the_fs_tier_is_shared(fleet_ready, ssh_key, wheelhouse, env, tmp_path):  # noqa: F811
    shared, own = tmp_path / "shared", tmp_path / "own"
    shared.mkdir()
    own.mkdir()
    mounts = {"host-1": [f"{shared}:/shared/kv"], "host-2": [f"{shared}:/shared/kv"], "host-3": [f"{own}:/shared/kv"]}
    recipe = _variant(tmp_path, "shared-fs.toml", SHARED_FS)
    with FleetHosts(3, ssh_key, mounts=mounts) as hosts:
        inventory = hosts.inventory(tmp_path / "hosts.ini")
        rollout = run_cli("fleet", "rollout", str(recipe), "-i", str(inventory), "--skip-up", "--wheelhouse",
                          str(wheelhouse), "--skip", "host.docker-engine", "--skip", "host.cpu-tier-ram", env=env,
                          timeout=900)
        assert rollout.returncode == 0, rollout.stdout + rollout.stderr[-4000:]
        checked = run_cli("fleet", "doctor", str(recipe), "-i", str(inventory), "--scope", "host",
                          "--skip", "host.docker-engine", "--skip", "host.cpu-tier-ram", "--format", "json", env=env,
                          timeout=600)
        assert checked.returncode == 1, checked.stdout + checked.stderr[-4000:]
        by_host = {h["host"]: h for h in json.loads(checked.stdout)["hosts"]}
        assert by_host["host-1"]["status"] == "ok" and by_host["host-2"]["status"] == "ok", by_host
        assert by_host["host-3"]["status"] == "failed"
        assert "fs tier /shared/kv is not shared: the marker host-1 wrote there is not on this host" in \
            by_host["host-3"]["message"]
    assert list(shared.iterdir()) == [] and list(own.iterdir()) == []
