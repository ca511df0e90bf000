"""Doctor against real images and real servers: the smoke stack passes; an unpurged image fails the CUDA-only check;
an unset PYTHONHASHSEED fails the offline hash check. (LMCache on CPU with the connector off, caught degraded, is a
fault case: tests/faults/test_lmcache_faults.py.)"""

from __future__ import annotations

import json

import pytest
from helpers import run_cli
from stacks import variant

pytestmark = [pytest.mark.docker, pytest.mark.slow]

# LMCache's PyPI wheel (a CUDA build; the default is the sdist build): what these tests catch.
LMCACHE_ON = {
    '[versions]\n': '[versions]\nlmcache = "0.5.6"\n',
    # stackctl's CPU connector switched off: LMCache has no connector of its own for the CPU device (degraded).
    "[cache]\nenabled = false": "[cache]\nenabled = true\ncpu_connector = false",
    "[checks]": '[build]\nlmcache_from = "wheel"\n\n[checks]',
}


def doctor(env, recipe, *args):
    result = run_cli("doctor", str(recipe), "--format", "json", *args, env=env, timeout=1200)
    assert result.returncode in (0, 1), result.stdout + result.stderr
    report = json.loads(result.stdout)
    return result.returncode, {r["id"]: r for r in report["results"]}


def test_smoke_stack_is_healthy(smoke_stack):
    code, results = doctor(smoke_stack.env, smoke_stack.recipe)
    failing = {k: v["message"] for k, v in results.items() if v["status"] == "fail"}
    assert code == 0, failing
    assert results["server.hit-test"]["status"] == "pass"
    hit = results["server.hit-test"]["details"]
    assert hit["hbm_hits"] >= 0.5 * hit["prompt_tokens"] > 0
    assert results["server.engine-config"]["status"] == "pass"
    assert results["image.hash-seed"]["status"] == "pass"
    assert results["image.cuda-only-packages"]["status"] == "pass"
    assert results["image.versions"]["status"] == "pass"
    assert results["server.models"]["status"] == "pass"
    # Nothing LMCache-specific can pass on a stack without LMCache: those checks skip with the reason.
    assert results["server.lmcache-initialised"]["status"] == "skip"


def test_junit_report_reads_with_a_junit_parser(smoke_stack, tmp_path):
    from junitparser import JUnitXml

    out = tmp_path / "doctor.xml"
    result = run_cli("doctor", smoke_stack.recipe, "--scope", "host,image", "--format", "junit", "-o", str(out),
                     env=smoke_stack.env, timeout=600)
    assert result.returncode == 0, result.stderr
    xml = JUnitXml.fromfile(str(out))
    cases = [case for suite in xml for case in suite]
    assert {case.name for case in cases} >= {"host.docker-engine", "image.hash-seed", "image.cuda-only-packages"}
    assert not any(r.__class__.__name__ == "Failure" for case in cases for r in case.result)


@pytest.fixture(scope="module")
def lmcache_recipes(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("lmcache")
    on = dict(LMCACHE_ON, **{'name = "cpu-smoke"': 'name = "cpu-smoke-lmcache"', "port = 8000": "port = 8020"})
    unseeded = dict(on, **{"hash_seed = 0\n": ""})
    unpurged = dict(LMCACHE_ON, **{'name = "cpu-smoke"': 'name = "cpu-smoke-unpurged"',
                                   '[checks]': '[build]\nlmcache_from = "wheel"\npurge_cuda_packages = false\n\n[checks]'})
    sha256 = dict(unseeded, **{"cpu_connector = false\n": 'cpu_connector = false\n'
                                                          'extra = { pre_caching_hash_algorithm = "sha256_cbor" }\n'})
    return {"on": variant(tmp, "lmcache", on), "unseeded": variant(tmp, "lmcache-unseeded", unseeded),
            "sha256-unseeded": variant(tmp, "lmcache-sha256-unseeded", sha256),
            "unpurged": variant(tmp, "lmcache-unpurged", unpurged)}


def test_unpurged_lmcache_image_fails_cuda_only_check_purged_passes(docker_engine, stack_env, lmcache_recipes):
    for key in ("unpurged", "on"):
        build = run_cli("build", str(lmcache_recipes[key]), env=stack_env, timeout=3600)
        assert build.returncode == 0, build.stderr[-3000:]
    code, results = doctor(stack_env, lmcache_recipes["unpurged"], "--scope", "image")
    check = results["image.cuda-only-packages"]
    assert code == 1 and check["status"] == "fail"
    assert "cupy-cuda13x" in check["details"]["found"]
    code, results = doctor(stack_env, lmcache_recipes["on"], "--scope", "image")
    assert results["image.cuda-only-packages"]["status"] == "pass"
    # The PyPI wheel carries the CPU extension and a CUDA build of the GPU module: on platform cpu that is reported,
    # not passed, with the CPU build as the fix.
    backend = results["image.lmcache-backend"]
    assert backend["status"] == "warn" and backend["details"]["gpu_module"] == "cuda", backend
    assert "CUDA build of cuda_ops" in backend["message"] and "NO_GPU_EXT" in backend["fix"], backend


def test_offline_hash_check_needs_pythonhashseed(docker_engine, stack_env, lmcache_recipes):
    build = run_cli("build", str(lmcache_recipes["on"]), env=stack_env, timeout=3600)
    assert build.returncode == 0, build.stderr[-3000:]
    _, seeded = doctor(stack_env, lmcache_recipes["on"], "--scope", "image")
    assert seeded["image.hash-seed"]["status"] == "pass", seeded["image.hash-seed"]
    code, unseeded = doctor(stack_env, lmcache_recipes["unseeded"], "--scope", "image")
    assert unseeded["image.hash-seed"]["status"] == "fail", unseeded["image.hash-seed"]
    assert "differ" in unseeded["image.hash-seed"]["message"] and code == 1
    # What the sources say (LMCache's builtin hash of vLLM 0.32's fixed seed string varies per process), beside it.
    assert "from the sources, the seed is needed here" in unseeded["image.hash-seed"]["message"]
    # sha256_cbor on vLLM 0.32: the fixed seed string, a hash that does not vary: no seed needed, and none missed.
    _, fixed = doctor(stack_env, lmcache_recipes["sha256-unseeded"], "--scope", "image")
    assert fixed["image.hash-seed"]["status"] == "pass", fixed["image.hash-seed"]
    assert "the seed is not needed here" in fixed["image.hash-seed"]["message"]
