"""The facts-driven rules on recipes that vary one thing at a time: how a serve argument list reads to vLLM's parser
(stackctl/knowledge/serve_flags.py), which release stands in for an unknown one, what is still reported when the
version is unknown, and that every new rule's page cites the package, release and file:line of its fact."""

import re

import pytest
from helpers import FIXTURES, RECIPES

from stackctl.knowledge import facts, serve_flags
from stackctl.recipe import load_recipe
from stackctl.bundle.stackspec import StackSpec
from stackctl.rules.ruleset import RULES, run_rules

V33 = facts.release("vllm", "0.33.0")


def _kinds(args, release=V33):
    return [(p.index, p.kind) for p in serve_flags.judge(args, release)]


@pytest.mark.parametrize(("args", "expected", "text"), [
    (["--disable-log-requests"], [(0, "removed")], "use --no-enable-log-requests"),
    (["--swap-space", "16"], [(0, "removed")], "vLLM 0.17.1 was the last release"),
    (["--cuda-graph-sizes", "1", "2"], [(0, "removed")], "use --cudagraph-capture-sizes"),
    (["--enable-chunked-prefill", "true"], [(0, "value")], "unrecognized arguments: true"),
    (["--enable-chunked-prefill=false"], [(0, "value")], "write --no-enable-chunked-prefill"),
    (["--dtype", "bf16"], [(0, "value")], "did you mean 'bfloat16'"),
    (["--max_model_len=abc"], [(0, "value")], "not an integer"),
    (["--gpu-memory-utilization", "most"], [(0, "value")], "not a number"),
    (["--kv-transfer-config", "{bad"], [(0, "value")], "not valid JSON"),
    (["--enforce-eager", "--port"], [(1, "value")], "expects a value"),
    (["--log-config-file", "x.json"], [(0, "deprecated")], "will be removed"),
    (["--frobnicate", "3"], [(0, "unknown")], "any release stackctl has facts for"),
    (["stray"], [(0, "value")], "is not an option"),
    (["--port.x=1"], [(0, "value")], "not a JSON option"),
])
def test_serve_arguments_read_as_vllms_parser_reads_them(args, expected, text):
    problems = serve_flags.judge(args, V33)
    assert [(p.index, p.kind) for p in problems] == expected
    assert text in problems[0].message


@pytest.mark.parametrize("args", [
    ["-tp", "2", "--no-enable-prefix-caching", "--max-model-len", "32k", "--kv-cache-memory-bytes", "1G"],
    ["--compilation-config.mode=3", "-O3", "-O", "2", "--max-num-seq", "8"],  # dotted keys, -O, a unique prefix
    ["--served-model-name", "a", "b", "--api-key", "k1", "--quantization", "None"],
])
def test_arguments_vllm_accepts_are_clean(args):
    assert _kinds(args) == []


def test_a_flag_only_later_releases_have_is_unknown_with_its_first_release():
    problems = serve_flags.judge(["--grpc-port", "9000"], facts.release("vllm", "0.19.1"))
    assert problems[0].kind == "unknown" and "first appears in vLLM" in problems[0].message


def test_the_nearest_release_stands_in_and_says_so():
    assert facts.nearest("vllm", "0.27.0") == "0.27.1"  # same minor, later patch
    assert facts.nearest("vllm", "0.20.5") == "0.20.2"
    assert facts.nearest("vllm", "0.40.0") == "0.33.0"
    assert facts.nearest("vllm", "0.9.0") == "0.10.2"
    assert facts.nearest("vllm", "main") is None and facts.release("vllm", None) is None
    release = facts.release("vllm", "0.27.0")
    assert not release.exact and "no facts for 0.27.0" in release.label()


def _fixture(rule_id, name="fail.toml"):
    return load_recipe(FIXTURES / "rules" / rule_id / name)


def test_with_the_vllm_version_unknown_what_every_release_says_is_still_reported():
    recipe = _fixture("vllm-flag-removed")
    recipe.versions.vllm = None  # a plain vLLM on ROCm: the base image decides
    findings = run_rules(recipe)
    assert [f.rule_id for f in findings] == ["vllm-flag-removed"]
    assert "version unknown: every release from 0.19.0 to 0.33.0 says so" in findings[0].message


def test_with_the_vllm_version_unknown_a_flag_releases_disagree_on_is_named_as_not_applied():
    recipe = _fixture("vllm-flag-removed")
    recipe.versions.vllm = None
    recipe.serve.extra_args = ["--grpc-port", "9000"]  # only the newest releases have it
    findings = run_rules(recipe)
    assert [f.rule_id for f in findings] == ["version-unknown"]
    assert "vllm-flag-unknown" in findings[0].message


def test_flags_from_typed_keys_are_judged_by_name_only():
    recipe = _fixture("vllm-flag-removed", "pass.toml")
    recipe.versions.vllm = "0.10.2"  # older than --no-async-scheduling... but async_scheduling is unset here
    recipe.serve.extra_args = []
    assert [f.rule_id for f in run_rules(recipe)] == []


@pytest.mark.parametrize(("value", "type_text", "problem"), [
    ("yes", "bool", "False"), (True, "bool", None), ("1", "bool", None),
    ("many", "int", "not a number"), ("2.5", "int", "whole"), ("256", "int", None), ([1], "float", "not a number"),
    (None, "str?", None), (None, "int", "null"), ([], "dict?", "object"), ({}, "str", "string"),
])
def test_lmcache_values_as_its_converters_read_them(value, type_text, problem):
    from stackctl.rules.fact_rules import _lmcache_value_problem

    found = _lmcache_value_problem(value, type_text)
    assert (found is None) if problem is None else (problem in found)


def test_an_lmcache_alias_in_the_yaml_names_the_key_to_use():
    recipe = _fixture("lmcache-key-unknown")
    findings = run_rules(recipe)
    assert "use `enable_pd`" in findings[0].message


def test_compilation_keys_in_serve_extra_args_are_judged_too():
    recipe = _fixture("compilation-config-value", "pass.toml")
    recipe.serve.compilation_config = {}
    recipe.serve.extra_args = ["--compilation-config", '{"pass_config": {"enable_sp": true}, "cudagraph_capture_sizes": "big"}']
    ids = {f.rule_id for f in run_rules(recipe)}
    assert {"compilation-config-key-unknown", "compilation-config-value"} <= ids


def test_layerwise_told_through_an_extra_kv_transfer_config_passes():
    recipe = _fixture("layerwise-not-told-to-vllm")
    recipe.cache.enabled = False
    recipe.cache.tiers = []
    recipe.serve.extra_args = ["--kv-transfer-config", '{"kv_connector":"LMCacheConnectorV1","kv_role":"kv_both",'
                                                       '"kv_connector_extra_config":{"use_layerwise":true}}']
    assert "layerwise-not-told-to-vllm" not in [f.rule_id for f in run_rules(recipe)]
    recipe.serve.extra_args[1] = recipe.serve.extra_args[1].replace("true", "false")
    assert "layerwise-not-told-to-vllm" in [f.rule_id for f in run_rules(recipe)]


def test_gds_with_posix_io_on_rocm_is_not_a_cufile_problem():
    recipe = _fixture("gds-cufile-on-rocm")
    recipe.cache.extra["use_gds"] = False
    assert [f.rule_id for f in run_rules(recipe)] == []


NEW_RULES = ["vllm-flag-removed", "vllm-flag-unknown", "vllm-flag-value", "vllm-flag-deprecated",
             "compilation-config-key-unknown", "compilation-config-value", "vllm-env-unknown", "kv-connector-unknown",
             "lmcache-key-unknown", "lmcache-key-renamed", "lmcache-key-value", "lmcache-env-unknown",
             "lmcache-remote-url-scheme", "layerwise-not-told-to-vllm", "gds-buffer-size-missing",
             "gds-cufile-on-rocm", "shared-store-hash-seed", "offload-spec-unknown", "offload-key-missing",
             "offload-key-unknown"]


@pytest.mark.parametrize("rule_id", NEW_RULES)
def test_new_rule_pages_cite_the_package_release_and_file_line(rule_id):
    assert re.search(r"(vLLM|LMCache) [0-9.]+\s+\S+\.py:\d+", RULES[rule_id].doc), rule_id


@pytest.mark.parametrize("rule_id", [r for r in NEW_RULES if r in (
    "vllm-flag-removed", "vllm-flag-value", "compilation-config-key-unknown", "lmcache-key-unknown",
    "lmcache-remote-url-scheme", "vllm-env-unknown", "kv-connector-unknown")])
def test_generated_findings_cite_the_facts_they_used(rule_id):
    finding = run_rules(_fixture(rule_id))[0]
    assert re.search(r"(vLLM|LMCache|vllm|lmcache) [0-9.]+", finding.message), finding.message


def test_lmcache_rules_read_no_release_when_the_recipe_gives_them_nothing(monkeypatch):
    """With versions.lmcache unknown each LMCache rule judges the recipe against every release's facts; a recipe
    with nothing they judge (no cache.extra, no serve.env, no lmcache server, no remote_url) reads none of them and
    gets no finding from them, as judging would have found."""
    from stackctl.rules.registry import package_version

    read = []
    real_load = facts.load
    monkeypatch.setattr(facts, "load", lambda package, version: read.append(package) or real_load(package, version))
    recipe = load_recipe(RECIPES / "cpu-smoke.toml")
    assert package_version(StackSpec(recipe), "lmcache") is None and not recipe.cache.extra and not recipe.serve.env
    findings = run_rules(recipe)
    assert "vllm" in read  # the log was read: the vLLM flags were judged against their release
    assert "lmcache" not in read
    assert [f for f in findings if f.rule_id.startswith("lmcache-") or f.rule_id == "version-unknown"] == []
    # the same recipe with one LMCache variable: the rules read the releases again and judge it
    recipe.serve.env["LMCACHE_NOT_A_KEY"] = "1"
    assert "lmcache-env-unknown" in {f.rule_id for f in run_rules(recipe)}
    assert "lmcache" in read


def test_an_lmcache_variable_spelled_lm_cache_or_one_letter_off_is_named_with_the_one_meant():
    """Launches write LM_CACHE_ (the package's words apart) or drop a letter; LMCache reads neither
    (lmcache 0.5.6 lmcache/v1/config.py:1001-1009 asks os.getenv(f"LMCACHE_{name.upper()}") per key)."""
    recipe = load_recipe(RECIPES / "cpu-lmcache.toml")
    recipe.serve.env.update({"LM_CACHE_CHUNK_SIZE": "256", "LMCACHE_CHUNK_SIZ": "256", "LM_CACHE_WHATEVER": "1"})
    messages = {f.key: f.message for f in run_rules(recipe) if f.rule_id == "lmcache-env-unknown"}
    assert messages == {
        "serve.env.LM_CACHE_CHUNK_SIZE": "LM_CACHE_CHUNK_SIZE is not read by LMCache 0.5.6: its variables start with "
                                         "LMCACHE_ (did you mean LMCACHE_CHUNK_SIZE?)",
        "serve.env.LMCACHE_CHUNK_SIZ": "LMCACHE_CHUNK_SIZ is not read by LMCache 0.5.6 (did you mean "
                                       "LMCACHE_CHUNK_SIZE?)",
        "serve.env.LM_CACHE_WHATEVER": "LM_CACHE_WHATEVER is not read by LMCache 0.5.6: its variables start with "
                                       "LMCACHE_"}
