"""image.tiers against real storage: the cpu-tiers image (LMCache built from its sdist, CPU extensions only) runs
LMCache's own storage round trip for every tier: CPU, a disk directory, a shared fs directory and a bucket on a real
Ceph RGW over TLS. Broken tiers fail with their cause, and every run leaves nothing behind."""

from __future__ import annotations

import json
import subprocess

import pytest
from helpers import RECIPES, run_cli
from storage import TIER_ROOT, bucket_keys, files_under

pytestmark = [pytest.mark.docker, pytest.mark.slow]

RECIPE = RECIPES / "cpu-tiers.toml"


@pytest.fixture(scope="module")
def tiers_image(docker_engine, tiers_env):
    run_cli("build", str(RECIPE), env=tiers_env, timeout=1800, check=True)


def image_tiers(env, recipe) -> dict:
    result = run_cli("doctor", str(recipe), "--scope", "image", "--format", "json", env=env, timeout=900)
    assert result.returncode in (0, 1), result.stdout + result.stderr
    return {r["id"]: r for r in json.loads(result.stdout)["results"]}["image.tiers"]


def only_tiers(tmp_path, name: str, tiers: str) -> str:
    """cpu-tiers.toml (same stack name: the same image) with other tiers."""
    text = RECIPE.read_text()
    head, rest = text.split("[[cache.tiers]]", 1)
    tail = rest[rest.index("[host]"):]
    path = tmp_path / f"{name}.toml"
    path.write_text(head + tiers + "\n" + tail)
    return str(path)


def nothing_left(settings):
    assert files_under(TIER_ROOT / "disk") == [] and files_under(TIER_ROOT / "fs") == []
    assert not [k for k in bucket_keys(settings) if k.startswith("stackctl-check-")]


def test_every_tier_round_trips_and_leaves_nothing(tiers_image, tiers_env, ceph_rgw):
    result = image_tiers(tiers_env, RECIPE)
    assert result["status"] == "pass", result["message"]
    tiers = result["details"]["tiers"]
    assert set(tiers) == {"cpu", "disk", "fs", "s3"}
    for kind, tier in tiers.items():
        assert tier["ok"] and tier["put_ms"] > 0 and tier["get_mb_s"] > 0, (kind, tier)
    assert "object(s) seen in bucket stackctl-kv, removed" in tiers["s3"]["message"]
    assert "0 object(s)" not in tiers["s3"]["message"]
    assert "file(s) seen in /tmp/stackctl-tiers/disk" in tiers["disk"]["message"]
    assert "0 file(s)" not in tiers["disk"]["message"] and "0 file(s)" not in tiers["fs"]["message"]
    nothing_left(ceph_rgw)


S3 = '''[[cache.tiers]]
kind = "cpu"
size_gb = 1

[[cache.tiers]]
kind = "s3"
url = "{url}"
region = "us-east-1"
ca_file = "/tmp/stackctl-ceph/tls/ca.pem"
access_key_env = "{key}"
secret_key_env = "STACKCTL_S3_SECRET_KEY"
'''
TLS = "s3://stackctl-kv.rgw.stackctl.test:17443"
IMAGE_S3_CASES = {
    "wrong access key": (S3.format(url=TLS, key="WRONG_S3_KEY"), "access denied"),
    "missing bucket": (S3.format(url="s3://stackctl-missing.rgw.stackctl.test:17443", key="STACKCTL_S3_ACCESS_KEY"),
                       "bucket missing"),
    "TLS on a plain-HTTP endpoint": (S3.format(url="s3://stackctl-kv.rgw.stackctl.test:17480",
                                               key="STACKCTL_S3_ACCESS_KEY"), "TLS mismatch"),
    "endpoint down": (S3.format(url="s3://stackctl-kv.rgw.stackctl.test:17499", key="STACKCTL_S3_ACCESS_KEY"),
                      "endpoint unreachable"),
}


@pytest.mark.parametrize("case", list(IMAGE_S3_CASES))
def test_s3_tier_failure_names_its_cause(case, tiers_image, tiers_env, ceph_rgw, tmp_path):
    tiers, expected = IMAGE_S3_CASES[case]
    result = image_tiers(dict(tiers_env, WRONG_S3_KEY="NOTTHEKEY0000000000"), only_tiers(tmp_path, "s3", tiers))
    assert result["status"] == "fail", result
    details = result["details"]["tiers"]
    assert details["cpu"]["ok"], details
    assert details["s3"]["message"].startswith(f"s3 failed: {expected}"), details["s3"]["message"]
    nothing_left(ceph_rgw)


@pytest.fixture
def small_mount(tmp_path):
    point = tmp_path / "mnt"
    point.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(point)], check=True)
    yield point
    subprocess.run(["umount", str(point)], check=True)


DISK = '''[[cache.tiers]]
kind = "cpu"
size_gb = 1

[[cache.tiers]]
kind = "disk"
path = "{path}"
size_gb = 1
'''


@pytest.mark.parametrize("case", ["read-only", "full"])
def test_disk_tier_failure_names_its_cause(case, small_mount, tiers_image, tiers_env, tmp_path):
    if case == "read-only":
        subprocess.run(["mount", "-o", "remount,ro", str(small_mount)], check=True)
    result = image_tiers(tiers_env, only_tiers(tmp_path, case, DISK.format(path=small_mount)))
    assert result["status"] == "fail", result
    message = result["details"]["tiers"]["disk"]["message"]
    expected = "path not writable" if case == "read-only" else "no space"
    assert message.startswith(f"disk failed: {expected}"), message
    assert files_under(small_mount) == []
