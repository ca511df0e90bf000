"""Every rule has a failing fixture that produces exactly that rule, and a passing fixture that is clean."""

import re

import pytest
from helpers import FIXTURES, RECIPES

from stackctl.recipe import load_recipe
from stackctl.rules.ruleset import RULES, run_rules

RULE_FIXTURES = FIXTURES / "rules"


def test_every_rule_has_both_fixtures_and_a_doc():
    for rule_id, rule in RULES.items():
        assert (RULE_FIXTURES / rule_id / "fail.toml").is_file(), rule_id
        assert (RULE_FIXTURES / rule_id / "pass.toml").is_file(), rule_id
        assert rule.severity in ("error", "warning", "info")
        assert len(rule.doc) > 80 and rule.fix and rule.summary
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)+", rule_id)
    assert {p.name for p in RULE_FIXTURES.iterdir()} == set(RULES)


def _words(text: str) -> str:
    return " ".join(re.sub(r"[`*]", "", text).split()).lower()


def test_a_fix_is_said_once_in_fix_and_the_doc_page_says_why():
    """`stackctl explain` prints the fix from fix=; a doc that says it again drifts from it (17 rules did).
    Every page explain shows: the rules and the doctor checks."""
    from stackctl.cli.catalog import _all_entries

    entries = list(_all_entries().values())
    assert {entry.id for kind, entry in entries if kind == "rule"} == set(RULES)
    for kind, entry in entries:
        assert not re.search(r"^\s*fix:", entry.doc, re.I | re.M), f"{kind} {entry.id}: its doc has a Fix: paragraph"
        assert _words(entry.fix) not in _words(entry.doc), f"{kind} {entry.id}: its doc repeats fix= word for word"


@pytest.mark.parametrize("rule_id", sorted(RULES))
def test_failing_fixture_produces_exactly_its_rule(rule_id):
    path = RULE_FIXTURES / rule_id / "fail.toml"
    findings = run_rules(load_recipe(path))
    # A fixture may name rules that necessarily come with its own (`# also: ID`), e.g. a key that can only be
    # written in cache.extra is also reported as shadowing the recipe.
    also = re.findall(r"^# also: ([a-z0-9-]+)", path.read_text(), re.M)
    assert sorted(f.rule_id for f in findings) == sorted([rule_id, *also])
    finding = next(f for f in findings if f.rule_id == rule_id)
    assert finding.file == str(path) and finding.line > 1
    # The line the finding points at is part of what the rule talks about.
    line_text = path.read_text().splitlines()[finding.line - 1]
    assert line_text.strip(), f"{rule_id} points at an empty line"


@pytest.mark.parametrize("rule_id", sorted(RULES))
def test_passing_fixture_is_clean(rule_id):
    assert run_rules(load_recipe(RULE_FIXTURES / rule_id / "pass.toml")) == []


@pytest.mark.parametrize("recipe", sorted(p.name for p in RECIPES.glob("*.toml")))
def test_shipped_recipes_are_clean(recipe):
    assert run_rules(load_recipe(RECIPES / recipe)) == []


def test_skip_list_silences_a_rule():
    path = RULE_FIXTURES / "save-decode-cache" / "fail.toml"
    assert run_rules(load_recipe(path), skip=["save-decode-cache"]) == []


def _recipe(text: str, **replace):
    from stackctl.recipe import load_recipe_text

    for old, new in replace.items():
        text = text.replace(old, new)
    return load_recipe_text(text)


def _ids(recipe):
    return [f.rule_id for f in run_rules(recipe)]


BASE = (RULE_FIXTURES / "gpu-visibility-mismatch" / "pass.toml").read_text()


@pytest.mark.parametrize(("hip", "cuda", "fails"), [
    ("0,1", "0,1", False),
    ("0,1", "0, 1", True),   # vLLM compares raw strings (vllm/platforms/rocm.py _sync_hip_cuda_env_vars)
    ("", "2,3", False),      # empty counts as unset
    ("0", "", False),
    ("0", "1", True),
])
def test_gpu_visibility_compares_raw_strings_and_empty_is_unset(hip, cuda, fails):
    recipe = load_recipe(RULE_FIXTURES / "gpu-visibility-mismatch" / "pass.toml")
    recipe.serve.env = {"HIP_VISIBLE_DEVICES": hip, "CUDA_VISIBLE_DEVICES": cuda}
    assert ("gpu-visibility-mismatch" in _ids(recipe)) is fails


def test_unknown_vllm_version_names_the_rules_not_applied_once():
    recipe = load_recipe(RULE_FIXTURES / "version-unknown" / "fail.toml")
    findings = run_rules(recipe)
    assert [f.rule_id for f in findings] == ["version-unknown"]
    assert findings[0].severity == "warning"
    assert "not applied: compilation-key-removed (set versions.vllm)" in findings[0].message
    # A variable no supported release reads needs no version: named, not left out.
    recipe.serve.env["VLLM_USE_V1"] = "1"
    findings = {f.rule_id: f.message for f in run_rules(recipe)}
    assert sorted(findings) == ["removed-env-var", "version-unknown"] and "removed-env-var" not in \
        findings["version-unknown"]
    recipe.versions.vllm = "0.27.1"
    assert sorted(_ids(recipe)) == ["compilation-key-removed", "removed-env-var"]
    recipe.versions.vllm = "0.10.0"  # both still existed then
    assert _ids(recipe) == []


def test_version_unknown_respects_skips():
    recipe = load_recipe(RULE_FIXTURES / "version-unknown" / "fail.toml")
    assert run_rules(recipe, skip=["compilation-key-removed"]) == []
    assert run_rules(recipe, skip=["version-unknown"]) == []


@pytest.mark.parametrize(("config", "problem"), [
    ('{"kv_connector":"X","kv_role":"kv_both","kv_parallel_size":"2"}', None),
    ('{"kv_parallel_size":2.0,"kv_port":"14579"}', None),
    ('{"kv_parallel_size":"two"}', "kv_parallel_size"),
    ('{"kv_parallel_size":2.5}', "kv_parallel_size"),
    ('{"kv_role":"both"}', "kv_role"),
    ('{"kv_connector":5}', "kv_connector"),
    ('{"kv_connector_extra_config":"x"}', "kv_connector_extra_config"),
    ('{"kv_conector":"LMCacheConnectorV1"}', "unknown key"),
    ('{"kv_connector":', "not valid JSON"),
])
def test_kv_transfer_config_is_judged_like_vllms_pydantic_model(config, problem):
    from stackctl.knowledge.kv_transfer import kv_transfer_problems

    problems = kv_transfer_problems(config)
    assert (problems == []) if problem is None else (problem in "; ".join(problems))


def test_s3_tls_rule_only_for_port_7480_with_tls_on():
    recipe = load_recipe(RULE_FIXTURES / "s3-tls-on-plain-http-port" / "fail.toml")
    recipe.cache.tiers[1].url = "s3://kv.rgw.example.com:443"
    assert _ids(recipe) == []


def test_cpu_buffer_missing_covers_nixl_storage_on_the_cpu_pool():
    recipe = load_recipe(RULE_FIXTURES / "cpu-buffer-missing" / "pass.toml")
    recipe.cache.tiers = []
    recipe.cache.extra = {"max_local_cpu_size": 0, "nixl_buffer_device": "cpu",
                          "extra_config": {"enable_nixl_storage": True}}
    assert _ids(recipe) == ["cpu-buffer-missing"]
    recipe.cache.extra["nixl_buffer_device"] = "cuda"
    assert _ids(recipe) == []


@pytest.mark.parametrize("rule_id", ["lmcache-prefix-caching-off", "save-decode-cache", "cpu-buffer-missing",
                                     "gpu-visibility-mismatch", "layerwise-needs-piecewise", "removed-env-var",
                                     "disk-tier-without-size", "s3-tls-on-plain-http-port",
                                     "kv-transfer-config-invalid"])
def test_rule_pages_cite_the_package_source(rule_id):
    assert re.search(r"(vLLM|LMCache) [0-9.]+\s+\S+\.py:\d+", RULES[rule_id].doc), rule_id
