"""LMCache faults on a real LMCache stack (recipes/cpu-lmcache.toml without its hash seed, the disk tier on a small
tmpfs): the seeds' silent failure (0 hits in a new process) caught and named; the S3 tier's bucket removed while
serving; the disk tier full; the CPU connector switched off (degraded mode). Each case: the outcome, serving goes
on, no container orphaned, no record lost, a row in the faults table."""

from __future__ import annotations

import json
import subprocess

import pytest
from helpers import run_cli
from stacks import Stack, variant
from stackctl.doctor.parsers.lmcache_log import ANSI

pytestmark = [pytest.mark.docker, pytest.mark.slow]

NAME = "cpu-lmcache-faults"


@pytest.fixture(scope="module")
def ceph():
    from storage import make_tier_dirs, remove_tier_dirs, start_ceph_rgw, stop_ceph_rgw

    make_tier_dirs()
    started, settings = start_ceph_rgw()
    yield settings
    if started:
        stop_ceph_rgw()
    remove_tier_dirs()


@pytest.fixture(scope="module")
def small_disk(tmp_path_factory):
    """The disk tier's directory: a 64 MiB tmpfs (three prompts of the bench model fill it)."""
    point = tmp_path_factory.mktemp("disk-tier")
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(point)], check=True)
    yield point
    subprocess.run(["umount", "-l", str(point)], check=False)


@pytest.fixture(scope="module")
def env(fault_env, ceph) -> dict:
    return dict(fault_env, STACKCTL_S3_ACCESS_KEY=ceph["STACKCTL_S3_ACCESS_KEY"],
                STACKCTL_S3_SECRET_KEY=ceph["STACKCTL_S3_SECRET_KEY"])


@pytest.fixture(scope="module")
def recipes(tmp_path_factory, small_disk) -> dict:
    folder = tmp_path_factory.mktemp("lmcache-faults")
    unseeded = {'name = "cpu-lmcache"': f'name = "{NAME}"', "port = 8020": "port = 8022",
                "hash_seed = 0\n": "", "/tmp/stackctl-tiers/disk": str(small_disk),
                'size_gb = 1\n\n[[cache.tiers]]\nkind = "fs"': 'size_gb = 0.05\n\n[[cache.tiers]]\nkind = "fs"'}
    no_connector = dict(unseeded, **{"[cache]\nenabled = true": "[cache]\nenabled = true\ncpu_connector = false"})
    return {"unseeded": variant(folder, "unseeded", unseeded, base="cpu-lmcache.toml"),
            "no_connector": variant(folder, "no-connector", no_connector, base="cpu-lmcache.toml")}


def up_anyway(stack: Stack) -> None:
    """`up --ignore-errors`: validate refuses these recipes (remote-tier-hash-seed, lmcache-on-cpu-platform), so the
    faults are what a user gets who goes ahead anyway, or whose running stack no longer matches the recipe."""
    result = stack.cli("up", stack.recipe, "--ignore-errors")
    assert result.returncode == 0, result.stdout + result.stderr[-4000:]


@pytest.fixture(scope="module")
def stack(recipes, env):
    stack = Stack(recipes["unseeded"], env)
    up_anyway(stack)
    yield stack
    stack.down()


def doctor(stack, *args) -> dict:
    result = stack.cli("doctor", stack.recipe, "--format", "json", *args, timeout=1800)
    assert result.returncode in (0, 1), result.stdout + result.stderr
    return {r["id"]: r for r in json.loads(result.stdout)["results"]}


def serves(stack) -> bool:
    from stackctl.httpclient import stream_completion

    answer = stream_completion("http://127.0.0.1:8022", "bench", " ".join(f"w{i}" for i in range(600)), max_tokens=2)
    return answer["usage"].get("completion_tokens") == 2


def history(stack) -> list:
    return json.loads(stack.cli("status", stack.recipe, "--history", "--format", "json").stdout)


def test_seed_unset_the_hash_seed_proof_fails_naming_pythonhashseed(stack, watch, fault_report):
    records = history(stack)
    results = doctor(stack, "--deep", "--scope", "server", "--skip", "server.tier-served")
    proof = results["server.hash-seed-proof"]
    assert proof["status"] == "fail", proof
    assert "PYTHONHASHSEED is not set in the stack" in proof["message"]
    assert proof["details"]["hit_tokens"] == 0 and proof["details"]["stack_seed"] is None
    # Not even one server hits without a seed: vLLM's scheduler looks LMCache's keys up in its engine process and
    # the worker processes store them, each process with its own random seed.
    hit = results["server.lmcache-hit"]
    assert hit["status"] == "fail" and hit["details"]["loaded"]["retrieved_tokens"] == 0, hit
    assert hit["details"]["stored"]["stored_tokens"] > 0
    orphans, lost = watch.orphans(), [r for r in records if r not in history(stack)]
    assert not orphans and not lost
    fault_report.add("PYTHONHASHSEED unset, shared fs tier", "server.hash-seed-proof fails naming PYTHONHASHSEED",
                     proof["message"], orphans, lost)


def test_s3_bucket_removed_while_serving_the_tier_check_fails_and_serving_goes_on(stack, ceph, watch, fault_report):
    import boto3
    from botocore.config import Config

    client = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{ceph['STACKCTL_S3_HTTP_PORT']}",
                          region_name="us-east-1", aws_access_key_id=ceph["STACKCTL_S3_ACCESS_KEY"],
                          aws_secret_access_key=ceph["STACKCTL_S3_SECRET_KEY"],
                          config=Config(s3={"addressing_style": "path"}))
    bucket = ceph["STACKCTL_S3_BUCKET"]
    for item in client.list_objects_v2(Bucket=bucket).get("Contents", []):
        client.delete_object(Bucket=bucket, Key=item["Key"])
    client.delete_bucket(Bucket=bucket)
    try:
        assert serves(stack)  # LMCache falls back: the request is answered
        results = doctor(stack, "--scope", "host")
        tier = results["host.s3-tier"]
        assert tier["status"] == "fail" and bucket in tier["message"], tier
        assert serves(stack)
    finally:
        client.create_bucket(Bucket=bucket)
    orphans = watch.orphans()
    assert not orphans
    fault_report.add("S3 tier's bucket removed while serving", "host.s3-tier fails naming the bucket; requests "
                     "are still answered", f"{tier['message']}; 2 requests answered", orphans, [])


def test_disk_tier_full_is_reported_and_the_server_keeps_serving(stack, small_disk, watch, fault_report):
    import os

    filler = small_disk / "filler"
    free = os.statvfs(small_disk)
    subprocess.run(["fallocate", "-l", str(free.f_bavail * free.f_frsize - 256 * 1024), str(filler)], check=True)
    try:
        for _ in range(3):
            assert serves(stack)
        results = doctor(stack, "--scope", "host")
        disk = results["host.disk-tier"]
        assert disk["status"] == "fail", disk
        assert run_cli("status", stack.recipe, env=stack.env).returncode == 0
        assert serves(stack)
    finally:
        filler.unlink()
    orphans = watch.orphans()
    assert not orphans
    fault_report.add("disk tier full (tmpfs filled)", "host.disk-tier fails; no crash, requests answered",
                     f"{disk['message']}; 4 requests answered", orphans, [])


def test_connector_off_degraded_mode_is_detected(stack, recipes, env, watch, fault_report):
    """Last: replaces the fault stack with the connector switched off (LMCache 0.5.6 then finds no connector for
    the CPU device and runs degraded: lmcache/v1/gpu_connector/__init__.py:247, lmcache/v1/manager.py:104-110)."""
    off = Stack(recipes["no_connector"], env)
    up_anyway(off)
    results = doctor(off, "--scope", "server")
    initialised = results["server.lmcache-initialised"]
    assert initialised["status"] == "fail" and "degraded mode" in initialised["message"], initialised
    assert results["server.lmcache-hit"]["status"] == "fail"
    assert serves(off)
    # The server's own account: LMCache says it runs degraded, stores nothing, and stackctl's connector is not loaded.
    log = ANSI.sub("", watch.engine.containers.get(f"stackctl-{NAME}").logs().decode("utf-8", "replace"))
    assert "degraded mode" in log and "No supported cpu connector found" in log, log[-3000:]
    assert "Stored " not in log and "stackctl CPU connector" not in log, log[-3000:]
    orphans = watch.orphans(f"stackctl-{NAME}")  # the stack's own container, replaced by this up
    assert not orphans
    fault_report.add("CPU connector switched off (cache.cpu_connector = false)",
                     "server.lmcache-initialised fails on the degraded-mode line",
                     initialised["message"], orphans, [])
