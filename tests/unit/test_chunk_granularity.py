"""LMCache's chunk beside vLLM's KV block: the block size a recipe runs with, the chunk size LMCache runs with, and
rule lmcache-chunk-above-block, which judges the two on vLLM-CPU (the plan's advice: test_plan_seams.py)."""

from __future__ import annotations

import pytest
from helpers import RECIPES

from stackctl.bundle import stackspec
from stackctl.recipe.loader import load_recipe_text
from stackctl.rules.ruleset import run_rules

CPU = (RECIPES / "cpu-lmcache.toml").read_text()
ROCM = (RECIPES / "atom-lmcache-cpu.toml").read_text()


def cpu_recipe(cache: str = "", serve: str = "", text: str = CPU):
    text = text.replace("hash_seed = 0\n", "hash_seed = 0\n" + cache, 1)
    return load_recipe_text(text.replace("[serve]\n", "[serve]\n" + serve, 1))


def chunk_findings(recipe) -> list:
    return [f for f in run_rules(recipe) if f.rule_id == "lmcache-chunk-above-block"]


def test_the_block_size_is_the_recipes_else_vllm_cpus_default_and_unknown_on_a_gpu():
    assert stackspec.vllm_block_size(cpu_recipe()) == stackspec.CPU_DEFAULT_BLOCK_SIZE == 128
    assert stackspec.vllm_block_size(cpu_recipe(serve="block_size = 64\n")) == 64
    assert stackspec.vllm_block_size(load_recipe_text(ROCM)) is None


@pytest.mark.parametrize(("cache", "serve", "expected"), [
    ("", "", 128),  # the shipped recipe's cache.chunk_size
    ("extra = { chunk_size = 512 }\n", "", 512),  # cache.extra is written over it in lmcache.yaml
    ("extra = { chunk_size = 512 }\n", 'env = { LMCACHE_CHUNK_SIZE = "64" }\n', 64),  # LMCache's env wins
    ("", 'env = { LMCACHE_CHUNK_SIZE = "many" }\n', None),  # not a number: unknown
])
def test_the_chunk_size_lmcache_runs_with(cache, serve, expected):
    assert stackspec.lmcache_chunk_size(cpu_recipe(cache, serve)) == expected


def test_the_shipped_cpu_recipes_chunk_as_vllm_cpu_blocks():
    for name in ("cpu-lmcache.toml", "cpu-tiers.toml"):
        recipe = load_recipe_text((RECIPES / name).read_text())
        assert stackspec.lmcache_chunk_size(recipe) == stackspec.vllm_block_size(recipe), name


@pytest.mark.parametrize(("cache", "serve", "key"), [
    ("", "", None),
    ("", "block_size = 64\n", "cache.chunk_size"),  # a smaller block than the recipe's chunk
    ("extra = { chunk_size = 256 }\n", "", "cache.extra.chunk_size"),
    ("", 'env = { LMCACHE_CHUNK_SIZE = "256" }\n', "serve.env.LMCACHE_CHUNK_SIZE"),
    ("", "block_size = 32\nenv = { LMCACHE_CHUNK_SIZE = \"32\" }\n", None),
])
def test_the_rule_points_at_the_chunk_size_lmcache_runs_with(cache, serve, key):
    findings = chunk_findings(cpu_recipe(cache, serve))
    assert [f.key for f in findings] == ([key] if key else [])


def test_the_rule_judges_only_lmcache_serving_on_vllm_cpu():
    coarse = CPU.replace("chunk_size = 128", "chunk_size = 256", 1)
    assert len(chunk_findings(load_recipe_text(coarse))) == 1
    off = load_recipe_text(coarse.replace("hash_seed = 0\n", "hash_seed = 0\ncpu_connector = false\n", 1))
    assert chunk_findings(off) == []  # LMCache stores nothing there: lmcache-on-cpu-platform says so
    assert chunk_findings(load_recipe_text(ROCM)) == []  # chunk_size 256 over a GPU's blocks: not judged
