"""plan on a KV cache size the recipe sets outright (vLLM's --kv-cache-memory-bytes, or VLLM_CPU_KVCACHE_SPACE on
cpu): HBM for KV is that size, so a CPU stack gets a regime instead of "unknown"."""

from __future__ import annotations

import copy

from helpers import RECIPES

from stackctl.knowledge.serve_flags import human_int
from stackctl.plan import REGIME_CPU_TIER, REGIME_FITS_HBM, REGIME_UNKNOWN, plan_recipe
from stackctl.plan.recipe import kv_cache_size
from stackctl.recipe import load_recipe


def test_human_int_reads_counts_as_vllm_does():
    assert human_int("1G") == 2**30 and human_int("1g") == 10**9 and human_int("25.6k") == 25_600
    assert human_int("2M") == 2 * 2**20 and human_int("123") == 123 and human_int("1T") == 2**40
    assert human_int("auto") is None and human_int("G") is None and human_int("1.2.3k") is None


def test_the_recipes_kv_cache_size_and_where_it_comes_from():
    recipe = load_recipe(RECIPES / "cpu-lmcache.toml")
    assert kv_cache_size(recipe) == (2**30, "--kv-cache-memory-bytes 1G in serve.extra_args")
    other = copy.deepcopy(recipe)
    other.serve.extra_args = ["--kv-cache-memory-bytes=64M"]
    assert kv_cache_size(other) == (64 * 2**20, "--kv-cache-memory-bytes 64M in serve.extra_args")
    other.serve.env = {"VLLM_CPU_KVCACHE_SPACE": "2"}  # vLLM applies it over the flag on cpu
    assert kv_cache_size(other) == (2 * 2**30, "VLLM_CPU_KVCACHE_SPACE=2 in serve.env")
    other.serve.env, other.serve.extra_args = {}, ["--kv-cache-memory-bytes"]  # no value: vLLM's parser refuses it
    assert kv_cache_size(other) is None


def test_a_cpu_stack_with_a_kv_size_gets_a_regime():
    recipe = load_recipe(RECIPES / "cpu-lmcache.toml")
    recipe.serve.extra_args = ["--kv-cache-memory-bytes", str(24_576 * 3_000)]  # 3,000 tokens of this model's KV
    fits = plan_recipe(recipe, users=2, context_tokens=1_000)
    assert fits.hbm_tokens == 3_000 and fits.regime == REGIME_FITS_HBM
    assert any(note.startswith("HBM for KV set outright: 73,728,000 bytes") for note in fits.notes)
    assert plan_recipe(recipe, users=4, context_tokens=1_000).regime == REGIME_CPU_TIER
    recipe.serve.extra_args = []
    assert plan_recipe(recipe, users=4, context_tokens=1_000).regime == REGIME_UNKNOWN  # no GPU, no size: no claim
