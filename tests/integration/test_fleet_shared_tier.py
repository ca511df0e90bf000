"""Fleet doctor proves a shared fs or S3 tier is shared: three sshd hosts with the same tier, where host-3 sees a
store of its own under the same name (another directory at the fs path; another Ceph RGW behind the S3 endpoint's
names). One host writes a marker, every other host of the group must read it: host-3 fails, naming the tier and the
writer; no marker is left behind. A writer that failed earlier makes nobody "not shared": the next host writes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fleet_hosts import FleetHosts
from helpers import run_cli
from stacks import variant
from test_fleet import env, fleet_ready, ssh_key, wheelhouse  # noqa: F401  (shared fixtures)

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
    recipe = variant(tmp_path, "shared-fs.toml", SHARED_FS)
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


# The same fs tier on every host, and an S3 tier on the Ceph RGW over TLS: the CA and the credentials are files
# mounted on each host (the credentials file is what the recipe names; boto3 reads it on the host).
SHARED_FS_AND_S3 = {
    'vllm = "0.32.0"': 'vllm = "0.32.0"\nlmcache = "0.5.6"',
    "[cache]\nenabled = false": "[cache]\nenabled = true",
    "[host]": '[[cache.tiers]]\nkind = "cpu"\nsize_gb = 1\n\n[[cache.tiers]]\nkind = "fs"\npath = "/shared/kv"\n\n'
              '[[cache.tiers]]\nkind = "s3"\nurl = "s3://stackctl-kv.rgw.stackctl.test:17443"\nregion = "us-east-1"\n'
              'ca_file = "/etc/stackctl-test/ca.pem"\ncredentials_file = "/etc/stackctl-test/s3-credentials"\n\n[host]',
}
S3_TIER = "s3 tier bucket stackctl-kv at rgw.stackctl.test:17443"
HOSTS_FOR = {"first": "127.0.0.1", "second": "127.0.0.2"}


def _point_at(host_dir, rgw: dict, which: str) -> None:
    """What one host sees as rgw.stackctl.test: its /etc/hosts and CA (bind-mounted files, rewritten in place)."""
    (host_dir / "hosts").write_text(f"127.0.0.1 localhost\n{HOSTS_FOR[which]} rgw.stackctl.test "
                                    "stackctl-kv.rgw.stackctl.test\n")
    (host_dir / "ca.pem").write_text(Path(rgw["STACKCTL_S3_CA_FILE"]).read_text())


def _proofs(host: dict) -> list[tuple]:
    return [(t["ok"], t["message"]) for t in host["shared_tiers"]]


@pytest.mark.docker
@pytest.mark.ansible
def test_fleet_doctor_proves_the_s3_tier_is_shared_and_a_failed_writer_blames_nobody(
        fleet_ready, ssh_key, wheelhouse, env, ceph_rgw, tmp_path):  # noqa: F811
    """host-1 and host-2 reach the Ceph RGW of the tier tests; host-3 resolves the same names to a second, separate
    RGW on 127.0.0.2 (its own bucket of the same name, same keys): its host.s3-tier check passes, but the marker
    host-1 put is not there. Then host-3 is pointed at the first RGW and host-1 loses stackctl: host-2 writes the
    markers instead and host-3 reads them, so both pass and host-1 fails for its own reason. Last, host-3 alone is
    left: it passes with a note that nothing was proven."""
    from storage import bucket_keys, second_ceph_rgw

    shared = tmp_path / "shared"
    shared.mkdir()
    credentials = tmp_path / "s3-credentials"
    credentials.write_text(f"[default]\naws_access_key_id = {ceph_rgw['STACKCTL_S3_ACCESS_KEY']}\n"
                           f"aws_secret_access_key = {ceph_rgw['STACKCTL_S3_SECRET_KEY']}\n")
    mounts = {}
    for host in ("host-1", "host-2", "host-3"):
        (tmp_path / host).mkdir()
        mounts[host] = [f"{shared}:/shared/kv", f"{credentials}:/etc/stackctl-test/s3-credentials:ro",
                        f"{tmp_path / host / 'ca.pem'}:/etc/stackctl-test/ca.pem:ro"]
    mounts["host-3"].append(f"{tmp_path / 'host-3' / 'hosts'}:/etc/hosts:ro")
    recipe = variant(tmp_path, "shared-s3.toml", SHARED_FS_AND_S3)
    skips = ["--skip", "host.docker-engine", "--skip", "host.cpu-tier-ram"]
    with second_ceph_rgw() as second_rgw:
        for host in ("host-1", "host-2"):
            _point_at(tmp_path / host, ceph_rgw, "first")
        _point_at(tmp_path / "host-3", second_rgw, "second")
        with FleetHosts(3, ssh_key, mounts=mounts) as hosts:
            inventory = hosts.inventory(tmp_path / "hosts.ini")
            rollout = run_cli("fleet", "rollout", str(recipe), "-i", str(inventory), "--skip-up", "--wheelhouse",
                              str(wheelhouse), *skips, env=env, timeout=900)
            assert rollout.returncode == 0, rollout.stdout + rollout.stderr[-4000:]

            def doctor() -> dict:
                checked = run_cli("fleet", "doctor", str(recipe), "-i", str(inventory), "--scope", "host", *skips,
                                  "--format", "json", env=env, timeout=600)
                assert checked.returncode in (0, 1), checked.stdout + checked.stderr[-4000:]
                assert not [p.name for p in shared.iterdir() if p.name.startswith(".stackctl-marker-")]
                for rgw in (ceph_rgw, second_rgw):
                    assert bucket_keys(rgw, "stackctl-marker/") == [], rgw  # the writer removed its marker
                return {h["host"]: h for h in json.loads(checked.stdout)["hosts"]}

            # 1. host-3 reaches another store under the same name: not shared, naming the tier and the writer.
            by_host = doctor()
            assert [by_host[h]["status"] for h in hosts.hosts] == ["ok", "ok", "failed"], by_host
            assert by_host["host-1"]["notes"] == [] and by_host["host-2"]["notes"] == []
            assert _proofs(by_host["host-2"]) == [(True, "fs tier /shared/kv: shared with host-1 (read its marker)"),
                                                  (True, f"{S3_TIER}: shared with host-1 (read its marker)")]
            assert by_host["host-3"]["failed_checks"] == []  # its own S3 works: it is just not the same one
            assert by_host["host-3"]["message"] == (f"{S3_TIER} is not shared: the marker object host-1 put there "
                                                    "is not in the bucket this host reaches")  # the fs tier is shared

            # 2. host-3 sees the first store again; host-1 fails before the marker step: host-2 writes instead.
            _point_at(tmp_path / "host-3", ceph_rgw, "first")
            assert hosts.ssh("host-1", "rm -rf /opt/stackctl").returncode == 0
            by_host = doctor()
            assert [by_host[h]["status"] for h in hosts.hosts] == ["failed", "ok", "ok"], by_host
            assert by_host["host-1"]["message"] == ("stackctl is not installed in /opt/stackctl/venv (run "
                                                    "`stackctl fleet rollout` first)")
            assert by_host["host-2"]["notes"] == [] and by_host["host-3"]["notes"] == []
            assert _proofs(by_host["host-3"]) == [(True, "fs tier /shared/kv: shared with host-2 (read its marker)"),
                                                  (True, f"{S3_TIER}: shared with host-2 (read its marker)")]

            # 3. Only host-3 is left of its groups: it passes, and says that proved nothing.
            assert hosts.ssh("host-2", "rm -rf /opt/stackctl").returncode == 0
            by_host = doctor()
            assert [by_host[h]["status"] for h in hosts.hosts] == ["failed", "failed", "ok"], by_host
            assert by_host["host-3"]["notes"] == [
                "fs tier /shared/kv: not proven shared: no other host of its group got to this check",
                f"{S3_TIER}: not proven shared: no other host of its group got to this check"]
