"""Host-side preflight of the KV tiers against real storage: a Ceph RGW on 127.0.0.1 (plain HTTP and TLS) and real
directories (a read-only bind of nothing: a read-only tmpfs; a full tmpfs). Each broken setup fails the right tier
with the right cause, and leaves nothing behind (no probe object in the bucket, no probe file on disk)."""

from __future__ import annotations

import json
import subprocess

import pytest
from helpers import RECIPES, run_cli
from stacks import variant
from storage import TIER_ROOT, bucket_keys, files_under, paused_osd

pytestmark = [pytest.mark.docker]

TLS_URL = 's3://stackctl-kv.rgw.stackctl.test:17443'
HTTP_URL = 's3://stackctl-kv.rgw.stackctl.test:17480'


def host_doctor(env, recipe):
    result = run_cli("doctor", str(recipe), "--scope", "host", "--format", "json", env=env, timeout=120)
    assert result.returncode in (0, 1), result.stdout + result.stderr
    return {r["id"]: r for r in json.loads(result.stdout)["results"]}


def test_every_tier_passes_on_the_test_servers(tiers_env, ceph_rgw):
    results = host_doctor(tiers_env, RECIPES / "cpu-tiers.toml")
    for check in ("host.s3-tier", "host.fs-tier", "host.disk-tier"):
        assert results[check]["status"] in ("pass", "warn"), results[check]
    assert "put, read back and deleted" in results["host.s3-tier"]["message"]
    assert "TLS" in results["host.s3-tier"]["message"]
    assert not [k for k in bucket_keys(ceph_rgw) if k.startswith("stackctl-probe/")]


S3_CASES = {
    "wrong access key": ({'access_key_env = "STACKCTL_S3_ACCESS_KEY"': 'access_key_env = "WRONG_S3_KEY"'},
                         "access denied"),
    "missing bucket": ({TLS_URL: 's3://stackctl-missing.rgw.stackctl.test:17443'}, "bucket missing"),
    "TLS on a plain-HTTP endpoint": ({TLS_URL: HTTP_URL}, "TLS mismatch: the recipe says TLS but"),
    "plain HTTP on a TLS endpoint": ({'region = "us-east-1"': 'region = "us-east-1"\ndisable_tls = true'},
                                     "TLS mismatch: the recipe says plain HTTP but"),
    "endpoint down": ({TLS_URL: 's3://stackctl-kv.rgw.stackctl.test:17499'}, "endpoint unreachable"),
    "untrusted certificate": ({'ca_file = "/tmp/stackctl-ceph/tls/ca.pem"\n': ''}, "TLS mismatch"),
}


@pytest.mark.parametrize("case", list(S3_CASES))
def test_s3_failure_names_its_cause(case, tiers_env, ceph_rgw, tmp_path):
    replacements, cause = S3_CASES[case]
    recipe = variant(tmp_path, "s3-case", replacements, base="cpu-tiers.toml")
    env = dict(tiers_env, WRONG_S3_KEY="NOTTHEKEY0000000000")
    result = host_doctor(env, recipe)["host.s3-tier"]
    assert result["status"] == "fail", result
    assert result["message"].startswith(cause), result["message"]
    assert not [k for k in bucket_keys(ceph_rgw) if k.startswith("stackctl-probe/")]


def test_a_gateway_whose_store_does_not_answer_is_told_from_one_that_is_down(tiers_env, ceph_rgw):
    """A Ceph cluster that takes no requests (full, or its storage daemon down) leaves the gateway up and silent;
    the check names that, not an unreachable endpoint, and passes again once the store answers."""
    with paused_osd():
        silent = host_doctor(tiers_env, RECIPES / "cpu-tiers.toml")["host.s3-tier"]
    assert silent["status"] == "fail" and silent["message"].startswith("store not answering"), silent
    assert "full or down" in silent["message"]
    assert host_doctor(tiers_env, RECIPES / "cpu-tiers.toml")["host.s3-tier"]["status"] == "pass"


def test_disk_tier_path_read_only_fails(tiers_env, small_mount, tmp_path):
    subprocess.run(["mount", "-o", "remount,ro", str(small_mount)], check=True)
    recipe = variant(tmp_path, "ro", {'path = "/tmp/stackctl-tiers/fs"': f'path = "{small_mount}"'},
                     base="cpu-tiers.toml")
    result = host_doctor(tiers_env, recipe)["host.fs-tier"]
    assert result["status"] == "fail" and result["message"].startswith("path not writable"), result


def test_fs_tier_without_space_fails(tiers_env, small_mount, tmp_path):
    recipe = variant(tmp_path, "full", {'path = "/tmp/stackctl-tiers/fs"': f'path = "{small_mount}"\nsize_gb = 1'},
                     base="cpu-tiers.toml")
    result = host_doctor(tiers_env, recipe)["host.fs-tier"]
    assert result["status"] == "fail" and result["message"].startswith("no space"), result
    assert files_under(small_mount) == []
    assert TIER_ROOT.is_dir()


def test_disk_tier_names_the_files_no_server_will_read(tiers_env, tmp_path):
    """Chunk files an earlier server left in the disk tier (the stack of this recipe is not running: every file is
    an earlier one's) are counted, sized and named with the command that deletes them, once they pass a tenth of
    the tier's size; LMCache's disk backend would neither read nor evict them."""
    folder = tmp_path / "disk"
    folder.mkdir()
    recipe = variant(tmp_path, "leftovers", {'path = "/tmp/stackctl-tiers/disk"\nsize_gb = 1':
                                             f'path = "{folder}"\nsize_gb = 0.01'}, base="cpu-tiers.toml")
    (folder / "a.pt").write_bytes(b"\0" * 512 * 1024)
    few = host_doctor(tiers_env, recipe)["host.disk-tier"]
    assert "1 file(s), 512 KiB" in few["message"] or few["message"] == f"{folder} is on a rotational disk", few
    (folder / "b.pt").write_bytes(b"\0" * 1024 * 1024)
    many = host_doctor(tiers_env, recipe)["host.disk-tier"]
    assert many["status"] == "warn", many
    assert f"{folder}: 2 file(s), 1.5 MiB, written before any server of this stack runs" in many["message"], many
    assert many["fix"] == f"delete them before `stackctl up`: find {folder} -type f -delete", many
