"""The stack spec: derived once from the recipe and the shell's options, frozen, and the only thing the later steps
read. The loaded recipe is never changed, whatever the options."""

from __future__ import annotations

import json

import pytest
from helpers import RECIPES

from stackctl.bundle import render, stackspec
from stackctl.bundle.stackspec import StackSpec
from stackctl.cli.common import check_rules
from stackctl.recipe import load_recipe


def test_a_spec_is_frozen_and_its_views_read_only():
    spec = StackSpec(load_recipe(RECIPES / "cpu-lmcache.toml"))
    with pytest.raises(AttributeError, match="frozen"):
        spec.recipe = None
    with pytest.raises(AttributeError, match="frozen"):
        spec.environment = {}
    with pytest.raises(TypeError):
        spec.environment["PYTHONHASHSEED"] = "1"  # type: ignore[index]
    assert isinstance(spec.serve_args, tuple) and isinstance(spec.volumes, tuple)


def test_each_value_is_derived_once_and_equals_the_derivation(monkeypatch):
    recipe = load_recipe(RECIPES / "cpu-lmcache.toml")
    spec = StackSpec(recipe)
    calls = []
    real = stackspec.environment
    monkeypatch.setattr(stackspec, "environment", lambda r: calls.append(r) or real(r))
    first = spec.environment
    assert spec.environment is first and len(calls) == 1  # kept, not derived again
    assert dict(first) == real(recipe)
    assert list(spec.serve_args) == stackspec.serve_args(recipe)
    assert spec.recipe_hash == stackspec.recipe_hash(recipe) and spec.lmcache_config == stackspec.lmcache_config(recipe)


def test_going_ahead_despite_rule_errors_is_recorded_on_the_spec_never_on_the_recipe(tmp_path):
    from stackctl.rules.ruleset import run_rules

    text = (RECIPES / "cpu-smoke.toml").read_text()
    path = tmp_path / "shadow.toml"  # a flag in extra_args that shadows serve.port: rule extra-args-shadow-flag
    path.write_text(text.replace('extra_args = [', 'extra_args = ["--port", "9000", ', 1))
    recipe = load_recipe(path)
    spec = StackSpec(recipe)
    errors = [f for f in run_rules(recipe) if f.severity == "error"]
    assert [f.rule_id for f in errors] == ["extra-args-shadow-flag"]
    ahead = check_rules(spec, str(path), "render", ignore_errors=True)
    assert ahead is not spec and ahead.recipe is recipe and not hasattr(recipe, "ignored_errors")
    assert [e["rule_id"] for e in ahead.ignored_errors] == [f.rule_id for f in errors]
    manifest = json.loads(render.render_files(ahead, guard=False)["manifest.json"])
    assert [e["rule_id"] for e in manifest["ignored_errors"]] == [f.rule_id for f in errors]
    assert "ignored_errors" not in json.loads(render.render_files(spec, guard=False)["manifest.json"])


def test_another_recipe_with_the_same_options_is_capped_the_same():
    spec = StackSpec(load_recipe(RECIPES / "cpu-lmcache.toml"), isa_cap="avx2")
    other = spec.with_recipe(load_recipe(RECIPES / "cpu-smoke.toml"))
    assert other.isa_cap == "avx2" and other.environment["ONEDNN_MAX_CPU_ISA"] == "AVX2"
