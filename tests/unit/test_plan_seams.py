"""The planner's seams on their own: capacity (bytes and tokens per place) and regime (the judgement over them)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from stackctl.knowledge.kv_math import GB, GiB, kv_footprint
from stackctl.knowledge.model_table import lookup
from stackctl.plan.capacity import Capacity, host_warnings, measure_capacity
from stackctl.plan.regime import (
    REGIME_CPU_TIER,
    REGIME_DISK_TIER,
    REGIME_DOES_NOT_FIT,
    REGIME_FITS_HBM,
    REGIME_REMOTE_TIER,
    REGIME_UNKNOWN,
    judge,
)


# 1,000 bytes a token everywhere: HBM holds 1,000 tokens, the CPU tier 2,000, the disk tier 4,000.
BASE = Capacity(tier_bytes_per_token=1000, usable_hbm_bytes=3_000_000, reserve_bytes=0, hbm_kv_bytes=1_000_000,
                hbm_tokens=1000, cpu_tier_bytes=2_000_000, cpu_tokens=2000, disk_tier_bytes=4_000_000,
                disk_tokens=4000, working_set_tokens=500, working_set_tier_bytes=500_000, host_ram_bytes=None,
                headroom_bytes=None)


def capacity(**overrides) -> Capacity:
    return replace(BASE, **overrides)


def sentence(cap: Capacity, kv_dtype_bytes: int = 2, remote_tiers: tuple[str, ...] = ()) -> tuple[str, str]:
    return judge(cap, users=1, context_tokens=cap.working_set_tokens, kv_dtype_bytes=kv_dtype_bytes,
                 gpu_vram_bytes=1, weights_bytes=1, remote_tiers=remote_tiers)


def regime(cap: Capacity, remote_tiers: tuple[str, ...] = ()) -> str:
    return sentence(cap, remote_tiers=remote_tiers)[0]


def test_the_smallest_place_that_holds_the_working_set_is_the_regime():
    assert regime(capacity(working_set_tokens=1000)) == REGIME_FITS_HBM
    assert regime(capacity(working_set_tokens=1001)) == REGIME_CPU_TIER
    assert regime(capacity(working_set_tokens=2001)) == REGIME_DISK_TIER
    assert regime(capacity(working_set_tokens=4001), remote_tiers=("s3",)) == REGIME_REMOTE_TIER
    assert regime(capacity(working_set_tokens=4001)) == REGIME_DOES_NOT_FIT
    assert regime(capacity(hbm_kv_bytes=0, hbm_tokens=0)) == REGIME_DOES_NOT_FIT


def test_unknown_hbm_names_what_is_missing():
    kind, sentence = judge(capacity(hbm_kv_bytes=None, hbm_tokens=None), users=1, context_tokens=500,
                           kv_dtype_bytes=2, gpu_vram_bytes=None, weights_bytes=10)
    assert kind == REGIME_UNKNOWN
    assert "GPU memory unknown" in sentence and "--gpu" in sentence and "model.path" not in sentence


def test_short_of_every_tier_suggests_the_cpu_tier_only_when_host_ram_allows_it():
    short = capacity(working_set_tokens=5000, working_set_tier_bytes=5 * GB)
    roomy = replace(short, host_ram_bytes=100 * GB, headroom_bytes=32 * GiB)
    tight = replace(short, host_ram_bytes=33 * GiB, headroom_bytes=32 * GiB)
    assert "raise the CPU tier to at least 5.0 GB" in sentence(roomy, kv_dtype_bytes=1)[1]
    assert "add or raise a disk tier to at least 5.0 GB" in sentence(tight, kv_dtype_bytes=1)[1]
    assert "fp8" not in sentence(tight, kv_dtype_bytes=1)[1]  # already one byte a value
    assert "fp8" in sentence(tight, kv_dtype_bytes=2)[1]


def test_capacity_counts_mla_tiers_on_the_first_rank_only():
    shape = lookup("/models/DeepSeek-R1").shape()
    fp = kv_footprint(shape, "auto", 8)
    cap = measure_capacity(shape, fp, tensor_parallel=8, gpu_memory_utilization=0.9, gpu_vram_bytes=None,
                           weights_bytes=None, cpu_tier_bytes=800 * GB, disk_tier_bytes=0, working_set_tokens=10,
                           host_ram_bytes=None)
    assert cap.tier_bytes_per_token == fp.total
    assert cap.cpu_tokens == 100 * GB // fp.total  # 1/8 of the tier holds KV
    assert cap.hbm_tokens is None and cap.headroom_bytes is None


def test_host_warnings_name_the_tier_the_host_cannot_give():
    fits = capacity(cpu_tier_bytes=10 * GB, host_ram_bytes=100 * GB, headroom_bytes=32 * GiB)
    assert host_warnings(fits, disk_free_bytes=10 * GB) == []
    too_big = replace(fits, cpu_tier_bytes=90 * GB, disk_tier_bytes=20 * GB)
    warnings = host_warnings(too_big, disk_free_bytes=10 * GB)
    assert [w.split()[0] + " " + w.split()[1] for w in warnings] == ["CPU tier", "disk tier"]


def test_plan_recipe_gathers_gpu_memory_weights_and_free_disk_from_the_host(tmp_path):
    """plan_recipe on the fixture MI300X host: GPU memory probed there, weights from the built-in table (the model
    directory is not on this machine), free disk from the disk tier's real directory."""
    from helpers import FIXTURES, RECIPES

    from stackctl.host import discover
    from stackctl.plan import plan_recipe
    from stackctl.recipe import load_recipe_text

    text = (RECIPES / "atom-lmcache-cpu-nvme.toml").read_text().replace('"/mnt/nvme/lmcache"', f'"{tmp_path}"', 1)
    recipe = load_recipe_text(text, "r.toml")
    host = discover(FIXTURES / "sysfs" / "mi300x-8gpu-2node")
    plan = plan_recipe(recipe, users=32, context_tokens=100_000, host=host, host_ram_bytes=512 * GiB)
    assert plan.gpu_vram_bytes == min(g.vram_bytes for g in host.gpus if g.vram_bytes)
    assert any(n.startswith("GPU memory probed on this host") for n in plan.notes)
    assert any(n.startswith("weights size from the built-in table") for n in plan.notes)
    assert plan.disk_free_bytes is not None and plan.disk_free_bytes > 0
    assert plan.host_ram_source == "--host-ram"


def test_plan_recipe_refuses_a_model_it_cannot_size(tmp_path):
    from helpers import RECIPES

    from stackctl.errors import StackctlError
    from stackctl.plan import plan_recipe
    from stackctl.recipe import load_recipe_text

    text = (RECIPES / "atom-lmcache-cpu.toml").read_text().replace('"/models/MiniMax-M2.5"', f'"{tmp_path}"', 1)
    with pytest.raises(StackctlError, match="no config.json there and not in the built-in model table"):
        plan_recipe(load_recipe_text(text, "r.toml"), users=1, context_tokens=1000)


def test_chunk_advice_weighs_lmcaches_chunk_against_vllms_block():
    from stackctl.plan.make import chunk_advice

    kind, text = chunk_advice(256, 128, True)  # the tail a CPU prefills on every LMCache hit: up to 255 tokens
    assert kind == "warning" and "recomputes up to 255 tokens" in text and "at most 128" in text
    assert "set cache.chunk_size = 128" in text and "lmcache-chunk-above-block" in text
    kind, text = chunk_advice(128, 128, True)
    assert kind == "note" and "no more of a prompt than one from vLLM's prefix cache" in text
    assert chunk_advice(64, 128, True)[0] == "note"
    kind, text = chunk_advice(256, 16, False)  # a GPU: said, not warned (no rule judges it there)
    assert kind == "note" and "up to 255 tokens" in text and "at most 16" in text
    kind, text = chunk_advice(256, None, False)  # the attention backend picks the block
    assert kind == "note" and "up to 255 tokens" in text and "block size" not in text


def test_plan_recipe_says_what_the_chunk_size_costs_a_hit(tmp_path):
    """On vLLM-CPU (128-token blocks) a larger chunk is a warning, the shipped CPU recipe's is a note; cache.extra's
    chunk_size is the one LMCache runs with."""
    from helpers import RECIPES

    from stackctl.plan import plan_recipe
    from stackctl.recipe import load_recipe_text

    text = (RECIPES / "cpu-lmcache.toml").read_text()
    shipped = plan_recipe(load_recipe_text(text, "r.toml"), users=1, context_tokens=2000, host_ram_bytes=64 * GiB)
    assert any("whole 128-token chunks" in n and "whole 128-token blocks" in n for n in shipped.notes)
    assert not any("chunk_size" in w for w in shipped.warnings)
    coarse = text.replace("chunk_size = 128", "chunk_size = 128\nextra = { chunk_size = 512 }", 1)
    plan = plan_recipe(load_recipe_text(coarse, "r.toml"), users=1, context_tokens=2000, host_ram_bytes=64 * GiB)
    assert [w for w in plan.warnings if w.startswith("cache.chunk_size 512 > vLLM's block size 128")]
