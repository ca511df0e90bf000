"""ATOM as it is now: launches of the plugin's development fork and ATOM's own LMCache offload connector import as
ATOM stacks with LMCache, the bundle of an ATOM stack never switches the plugin off, and a vLLM other than ATOM's
pin is a finding."""

from __future__ import annotations

from helpers import FIXTURES

from stackctl import importer
from stackctl.bundle import stackspec
from stackctl.recipe.loader import load_recipe_text
from stackctl.rules.ruleset import run_rules

FORK_LAUNCH = """#!/bin/bash
export VLLM_ROCM_USE_ATOM_PLUGIN=1
export VLLM_ROCM_USE_AITER=1
vllm serve /models/Qwen3-0.6B --tensor-parallel-size 1 --port 9090
"""

OFFLOAD_LAUNCH = """#!/bin/bash
export LMCACHE_LOCAL_CPU=True
export LMCACHE_MAX_LOCAL_CPU_SIZE=40
export LMCACHE_CHUNK_SIZE=256
export PYTHONHASHSEED=0
python -m atom.entrypoints.openai_server --model /models/m \\
  --kv-transfer-config '{"kv_connector":"lmcache_offload","kv_role":"offload"}'
"""


def _imported(script: str):
    text = importer.import_launch_text(script, None, "t")
    return load_recipe_text(text), text


def test_a_launch_of_the_plugins_development_fork_imports_as_atom():
    recipe, text = _imported(FORK_LAUNCH)
    assert (recipe.stack.platform, recipe.stack.engine) == ("rocm", "atom-vllm")
    assert "VLLM_ROCM_USE_ATOM_PLUGIN" not in recipe.serve.env
    assert "development fork" in text


def test_atoms_own_lmcache_offload_connector_imports_as_lmcache():
    recipe, text = _imported(OFFLOAD_LAUNCH)
    assert recipe.stack.engine == "atom-vllm" and recipe.cache.enabled
    assert [(t.kind, t.size_gb) for t in recipe.cache.tiers] == [("cpu", 40.0)]
    assert "lmcache_offload" in text and "lmcache_offload" not in " ".join(recipe.serve.extra_args)
    assert not [f for f in run_rules(recipe) if f.severity == "error"]


def test_validate_names_atoms_offload_connector_in_a_vllm_launch():
    text = (FIXTURES / "rules" / "atom-vllm-pin" / "pass.toml").read_text().replace(
        "[serve]\n", "[serve]\nextra_args = [\"--kv-transfer-config\", "
                     "'{\"kv_connector\":\"lmcache_offload\",\"kv_role\":\"kv_both\"}']\n")
    findings = run_rules(load_recipe_text(text))
    messages = [f.message for f in findings if f.rule_id == "kv-connector-unknown"]
    assert messages and "ATOM's own server's LMCache offload connector" in messages[0]


def test_an_atom_bundle_never_switches_the_plugin_off():
    text = (FIXTURES / "rules" / "atom-plugin-disabled" / "fail.toml").read_text()
    atom = load_recipe_text(text)
    assert "ATOM_DISABLE_VLLM_PLUGIN" not in stackspec.environment(atom)
    plain = load_recipe_text(text.replace('engine = "atom-vllm"', 'engine = "vllm"'))
    assert stackspec.environment(plain)["ATOM_DISABLE_VLLM_PLUGIN"] == "1"
