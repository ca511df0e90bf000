"""image.tiers against real storage: the cpu-tiers image (LMCache built from its sdist, CPU extensions only) drives
LMCache's own StorageManager through a round trip for every tier: CPU, a disk directory, a shared fs directory and a bucket on a real
Ceph RGW over TLS. Broken tiers fail with their cause, and every run leaves nothing behind."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from helpers import RECIPES, run_cli
from storage import TIER_ROOT, bucket_keys, files_under
from stackctl.bundle.stackspec import StackSpec

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
    """No chunk of a round trip is left (its objects carry a stackctl-check-* model name; other stacks on the machine
    may share these directories and the bucket)."""
    left = [p for name in ("disk", "fs") for p in files_under(TIER_ROOT / name) if "stackctl-check-" in str(p)]
    assert left == []
    assert not [k for k in bucket_keys(settings) if k.startswith("stackctl-check-")]


def test_every_tier_round_trips_and_leaves_nothing(tiers_image, tiers_env, ceph_rgw):
    result = image_tiers(tiers_env, RECIPE)
    assert result["status"] == "pass", result["message"]
    tiers = result["details"]["tiers"]
    assert set(tiers) == {"cpu", "disk", "fs", "s3"}
    # One object size for every tier: a 128-token KV chunk of the recipe's model (1 KiB a token), 64 of them.
    assert result["message"].startswith("64 x 128 KiB KV chunks (tiny-random-llama: 128 tokens x 1,024 B) per tier")
    for kind, tier in tiers.items():
        assert tier["ok"] and tier["chunk_bytes"] == 128 * 1024 and tier["put_bytes"] == 64 * 128 * 1024, (kind, tier)
        assert tier["put_ms"] > 0 and tier["get_mb_s"] > 0, (kind, tier)
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


def served_round_trip(container, recipe, environment: dict, tmp_path) -> dict:
    """The S3 tier's round trip (that tier's alone), run by `docker exec` inside the serving container (the stack's own
    image, mounts and trust store) with exactly `environment` added, with the spec image.tiers gives it."""
    import io
    import tarfile
    import uuid

    from stackctl.doctor import tier_roundtrip
    from stackctl.resources import shipped

    model = f"stackctl-check-{uuid.uuid4().hex[:12]}"
    chunk = tier_roundtrip.kv_chunk(recipe)
    spec_dir = tmp_path / f"spec-{model}"
    spec_dir.mkdir()
    tier_roundtrip.tier_specs(StackSpec(recipe), chunk, 4, model, str(spec_dir), mounted_at="/tmp/stackctl-served",
                              kinds={"s3"})
    files = {p.name: p.read_bytes() for p in spec_dir.iterdir()}
    files["roundtrip.py"] = (shipped("probes") / "tiers" / "roundtrip.py").read_bytes()
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(f"stackctl-served/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    assert container.put_archive("/tmp", archive.getvalue())
    # `env -u`: the round trip must not join the CA itself (it does when STACKCTL_S3_CA is set); only `environment`
    # decides what the S3 client trusts.
    command = ["env", "-u", "STACKCTL_S3_CA"] + [f"{k}={v}" for k, v in environment.items()] + [
        "python", "/tmp/stackctl-served/roundtrip.py", "--spec", "/tmp/stackctl-served/specs.json", "--timeout", "60"]
    result = container.exec_run(command, demux=True)
    stdout = (result.output[0] or b"").decode("utf-8", "replace")
    reports = tier_roundtrip.read_reports(stdout)
    s3 = reports.get("s3")
    assert s3 is not None, stdout + (result.output[1] or b"").decode("utf-8", "replace")[-2000:]
    return dict(s3, model=model, chunk_bytes=chunk.bytes)


def test_the_served_stack_trusts_the_s3_tiers_ca(lmcache_stack, ceph_rgw, docker_engine, tmp_path, monkeypatch):
    """`up` mounts the S3 tier's ca_file and serve.sh makes the server process trust it: LMCache's own S3 round trip,
    run inside the serving container with the server's SSL_CERT_FILE, stores and reads back chunks over TLS; without
    it the same run fails, so the CA the recipe names is what makes the tier work. The server is the main job's
    cpu-lmcache stack (its S3 tier is this TLS endpoint with the Ceph RGW's CA), read and left running."""
    from stackctl.doctor import tier_roundtrip
    from stackctl.recipe import load_recipe
    from stackctl.storage import s3_access

    for name in ("STACKCTL_S3_ACCESS_KEY", "STACKCTL_S3_SECRET_KEY"):  # this process lists and removes the objects
        monkeypatch.setenv(name, ceph_rgw[name])
    recipe = load_recipe(lmcache_stack.recipe)
    tier = recipe.tiers_of("s3")[0]
    assert tier.url == TLS and tier.ca_file == ceph_rgw["STACKCTL_S3_CA_FILE"], (tier.url, tier.ca_file)
    try:
        container = docker_engine.containers.get("stackctl-cpu-lmcache")
        server_env = dict(item.split("=", 1) for item in
                          container.exec_run(["cat", "/proc/1/environ"]).output.decode().split("\0") if "=" in item)
        assert server_env["STACKCTL_S3_CA"] == "/run/stackctl/s3-ca.pem", server_env
        ca = Path(ceph_rgw["STACKCTL_S3_CA_FILE"]).read_text().strip()
        bundle = container.exec_run(["cat", server_env["SSL_CERT_FILE"]]).output.decode()
        assert bundle.strip().endswith(ca) and bundle.count("BEGIN CERTIFICATE") > 1, "CA not joined to the bundle"

        trusted = served_round_trip(container, recipe, {"SSL_CERT_FILE": server_env["SSL_CERT_FILE"]}, tmp_path)
        outcome = tier_roundtrip.judge(tier, trusted, trusted["model"], trusted["chunk_bytes"])
        assert outcome.ok, outcome.message
        assert "4 object(s) seen in bucket stackctl-kv, removed" in outcome.message, outcome.message

        untrusted = served_round_trip(container, recipe, {}, tmp_path)
        # Without the CA nothing is stored (or the round trip times out on the TLS handshake): the tier fails.
        assert untrusted.get("stored", 0) == 0 and untrusted.get("equal", 0) == 0, untrusted
        assert not tier_roundtrip.judge(tier, untrusted, untrusted["model"], untrusted["chunk_bytes"]).ok
    finally:
        left = s3_access.list_keys(tier, "stackctl-check-")
        s3_access.delete_keys(tier, left)
    assert left == []
