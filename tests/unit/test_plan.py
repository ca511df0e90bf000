"""The capacity planner: regimes, figures, warnings and the text/JSON output.

Run with `pytest -s tests/unit/test_plan.py` to see the printed plans.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stackctl.errors import StackctlError
from stackctl.knowledge.gpu_table import lookup_gpu
from stackctl.knowledge.kv_math import GB, GiB
from stackctl.knowledge.model_table import lookup
from stackctl.plan import (
    HOST_RAM_HEADROOM_MIN_BYTES,
    OVERHEAD_RESERVE_FRACTION,
    REGIME_CPU_TIER,
    REGIME_DISK_TIER,
    REGIME_DOES_NOT_FIT,
    REGIME_FITS_HBM,
    REGIME_UNKNOWN,
    format_text,
    host_ram_headroom,
    make_plan,
)

MI300X = lookup_gpu("MI300X").spec.vram_bytes  # 206,141,652,992 B = 191.98 GiB
MINIMAX = lookup("/models/MiniMax-M2.5")


def minimax_plan(**overrides):
    args = dict(
        tensor_parallel=2,
        kv_cache_dtype="fp8",
        gpu_memory_utilization=0.9,
        gpu_vram_bytes=MI300X,
        weights_bytes=MINIMAX.weights_bytes,  # 220 GB
        cpu_tier_bytes=200 * GB,
        disk_tier_bytes=2000 * GB,
        users=32,
        context_tokens=100_000,
    )
    args.update(overrides)
    return make_plan(MINIMAX.shape(), **args)


def test_minimax_fp8_tp2_mi300x_32_users_100k_needs_the_disk_tier():
    plan = minimax_plan()
    print()
    print(format_text(plan))
    # Worked by hand:
    #   bytes/token fp8   = 2 x 62 layers x 8 KV heads x 128 x 1 byte = 126,976 (63,488 per GPU, 4 heads each)
    #   usable HBM        = 2 x 206,141,652,992 x 0.9  = 371,054,975,385 (floor of ...385.6)
    #   reserve           = 2 x 206,141,652,992 x 0.05 =  20,614,165,299 (floor of ...299.2)
    #   HBM for KV        = 371,054,975,385 - 220,000,000,000 - 20,614,165,299 = 130,440,810,086 B (130.4 GB)
    #   HBM tokens        = 130,440,810,086 // 126,976 = 1,027,287
    #   working set       = 32 x 100,000 = 3,200,000 tokens x 126,976 = 406,323,200,000 B (~406 GB) > HBM
    #   CPU tier          = 200,000,000,000 // 126,976 = 1,575,100 tokens  < 3,200,000: does not hold it
    #   disk tier         = 2,000,000,000,000 // 126,976 = 15,751,008 tokens >= 3,200,000: holds it
    #   => needs-disk-tier
    assert plan.bytes_per_token_total == 126_976
    assert plan.bytes_per_token_per_gpu == 63_488 and plan.kv_heads_per_gpu == 4
    assert plan.usable_hbm_bytes == 371_054_975_385
    assert plan.reserve_bytes == 20_614_165_299
    assert plan.hbm_kv_bytes == 130_440_810_086
    assert plan.hbm_tokens == 1_027_287
    assert plan.working_set_tokens == 3_200_000
    assert plan.working_set_bytes == 406_323_200_000
    assert plan.cpu_tier_tokens == 1_575_100
    assert plan.disk_tier_tokens == 15_751_008
    assert plan.working_set_bytes > plan.hbm_kv_bytes
    assert plan.regime == REGIME_DISK_TIER
    assert "1,027,287 tokens" in plan.recommendation and "406.3 GB" in plan.recommendation
    assert plan.warnings == []


def test_bf16_capacity_matches_vllm_recipe_figure():
    # vLLM's MiniMax-M2 recipe: "192G x2 AMD GPU (MI300X/MI325X): ~500K tokens" of KV (bf16, default utilization
    # 0.9). With the 5% reserve: (371.05 - 220 - 20.61) GB / 253,952 B = ~513k tokens.
    plan = minimax_plan(kv_cache_dtype="auto")
    assert plan.bytes_per_token_total == 253_952
    assert 450_000 <= plan.hbm_tokens <= 550_000
    assert OVERHEAD_RESERVE_FRACTION == 0.05


def test_cpu_tier_pays_off_when_it_holds_the_working_set():
    plan = minimax_plan(cpu_tier_bytes=500 * GB, disk_tier_bytes=0)
    # 500,000,000,000 // 126,976 = 3,937,752 tokens >= 3,200,000
    assert plan.cpu_tier_tokens == 3_937_752
    assert plan.regime == REGIME_CPU_TIER
    assert "500.0 GB" in plan.recommendation


def test_fits_hbm_says_lmcache_only_adds_overhead():
    llama = lookup("meta-llama/Llama-3.1-8B-Instruct")
    plan = make_plan(
        llama.shape(),
        tensor_parallel=1,
        kv_cache_dtype="auto",
        gpu_memory_utilization=0.9,
        gpu_vram_bytes=MI300X,
        weights_bytes=llama.weights_bytes,
        cpu_tier_bytes=50 * GB,
        disk_tier_bytes=None,
        users=8,
        context_tokens=8192,
    )
    print()
    print(format_text(plan))
    # HBM: 185,527,487,692 - 16,060,522,496 - 10,307,082,649 = 159,159,882,547 B // 131,072 = 1,214,293 tokens
    assert plan.hbm_tokens == 1_214_293
    assert plan.working_set_tokens == 65_536
    assert plan.regime == REGIME_FITS_HBM
    assert "+16% mean TTFT" in plan.recommendation and "turn the cache off" in plan.recommendation


def test_does_not_fit_points_at_the_tier_that_could_hold_it():
    plan = minimax_plan(cpu_tier_bytes=100 * GB, disk_tier_bytes=200 * GB, host_ram_bytes=1024 * GiB)
    assert plan.regime == REGIME_DOES_NOT_FIT
    assert "raise the CPU tier to at least 406.3 GB" in plan.recommendation
    small_host = minimax_plan(cpu_tier_bytes=100 * GB, disk_tier_bytes=200 * GB, host_ram_bytes=256 * GiB)
    assert "disk tier to at least 406.3 GB" in small_host.recommendation


def test_weights_larger_than_hbm_do_not_fit():
    plan = minimax_plan(tensor_parallel=1)  # 220 GB of weights on one 192 GiB GPU
    assert plan.regime == REGIME_DOES_NOT_FIT
    assert plan.hbm_tokens == 0 and plan.hbm_kv_bytes < 0
    assert "leave no HBM" in plan.recommendation


def test_unknown_gpu_memory_gives_no_verdict():
    plan = minimax_plan(gpu_vram_bytes=None)
    assert plan.regime == REGIME_UNKNOWN
    assert plan.hbm_tokens is None and "GPU memory" in plan.recommendation
    assert "unknown" in format_text(plan)
    plan = minimax_plan(weights_bytes=None)
    assert plan.regime == REGIME_UNKNOWN and "weights size" in plan.recommendation


def test_warnings_for_host_ram_and_free_disk_carry_the_figures():
    plan = minimax_plan(host_ram_bytes=192 * GiB, disk_free_bytes=1000 * GB)
    # headroom = max(10% of 192 GiB, 32 GiB) = 32 GiB; available = 160 GiB = 171.8 GB < 200 GB CPU tier
    assert host_ram_headroom(192 * GiB) == HOST_RAM_HEADROOM_MIN_BYTES == 32 * GiB
    assert plan.host_ram_headroom_bytes == 32 * GiB
    ram, disk = plan.warnings
    assert "CPU tier 200.0 GB" in ram and "host RAM 206.2 GB" in ram and "171.8 GB available" in ram
    assert "disk tier 2,000.0 GB" in disk and "free disk 1,000.0 GB" in disk and "by 1,000.0 GB" in disk
    roomy = minimax_plan(host_ram_bytes=1536 * GiB, disk_free_bytes=3000 * GB)
    assert roomy.warnings == []
    # large hosts keep 10% free
    assert host_ram_headroom(1536 * GiB) == int(1536 * GiB * 0.10)


def test_mla_tier_stores_on_the_first_rank_only_but_hbm_holds_one_per_gpu():
    deepseek = lookup("deepseek-ai/DeepSeek-R1")
    plan = make_plan(
        deepseek.shape(),
        tensor_parallel=8,
        kv_cache_dtype="auto",
        gpu_memory_utilization=0.9,
        gpu_vram_bytes=MI300X,
        weights_bytes=deepseek.weights_bytes,
        cpu_tier_bytes=1000 * GB,
        disk_tier_bytes=0,
        users=64,
        context_tokens=128_000,
    )
    print()
    print(format_text(plan))
    assert plan.bytes_per_token_total == plan.bytes_per_token_per_gpu == 70_272
    assert plan.bytes_per_token_all_gpus == 8 * 70_272
    assert plan.bytes_per_token_tier == 70_272
    # Only the first of 8 ranks stores (LMCache save_only_first_rank for MLA), and each rank gets 1/8 of the tier:
    # 1,000,000,000,000 // 8 // 70,272 = 1,778,802 tokens, short of 64 x 128,000 = 8,192,000.
    assert plan.cpu_tier_tokens == 1_778_802
    assert plan.regime != REGIME_CPU_TIER
    assert any("first rank only" in note and "first_rank_max_local_cpu_size" in note for note in plan.notes)
    small = make_plan(deepseek.shape(), tensor_parallel=8, kv_cache_dtype="auto", gpu_memory_utilization=0.9,
                      gpu_vram_bytes=MI300X, weights_bytes=deepseek.weights_bytes, cpu_tier_bytes=8000 * GB,
                      disk_tier_bytes=0, users=64, context_tokens=128_000)
    assert small.cpu_tier_tokens == 14_230_418 and small.regime == REGIME_CPU_TIER


def test_tp_beyond_kv_heads_is_noted():
    qwen = lookup("Qwen/Qwen3-235B-A22B")
    plan = make_plan(
        qwen.shape(),
        tensor_parallel=8,
        kv_cache_dtype="auto",
        gpu_memory_utilization=0.9,
        gpu_vram_bytes=MI300X,
        weights_bytes=qwen.weights_bytes,
        cpu_tier_bytes=0,
        disk_tier_bytes=0,
        users=1,
        context_tokens=1000,
    )
    assert plan.bytes_per_token_all_gpus == 2 * plan.bytes_per_token_total
    assert any("2x the unique KV bytes" in note for note in plan.notes)


def test_text_output_labels_gb_and_gib_and_aligns_columns():
    text = format_text(minimax_plan(host_ram_bytes=1536 * GiB))
    assert "GB = 10^9 bytes, GiB = 2^30 bytes" in text
    table = [line for line in text.splitlines() if "," in line and line.startswith("    ")]
    hbm = next(line for line in table if "HBM for KV" in line)
    assert "130.44" in hbm and "121.48" in hbm and "1,027,287" in hbm
    # the bytes column is right-aligned: every figure ends at the same column
    vram = next(line for line in table if "GPU VRAM" in line)
    assert hbm.index("130,440,810,086") + len("130,440,810,086") == vram.index("206,141,652,992") + len(
        "206,141,652,992"
    )


def test_to_dict_is_json_ready():
    data = minimax_plan(extra_notes=["GPU memory from the built-in table (MI300X)"]).to_dict()
    round_trip = json.loads(json.dumps(data))
    assert round_trip["regime"] == REGIME_DISK_TIER
    assert round_trip["hbm_tokens"] == 1_027_287
    assert round_trip["constants"]["overhead_reserve_fraction"] == 0.05
    assert round_trip["notes"][0] == "GPU memory from the built-in table (MI300X)"


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"gpu_memory_utilization": 1.5}, "gpu_memory_utilization"),
        ({"tensor_parallel": 0}, "tensor_parallel"),
        ({"users": 0}, "users"),
        ({"cpu_tier_bytes": -1}, "CPU tier"),
        ({"kv_cache_dtype": "fp4"}, "kv_cache_dtype"),
    ],
)
def test_bad_inputs_are_user_errors(overrides, message):
    with pytest.raises(StackctlError, match=message):
        minimax_plan(**overrides)


# -- plan tells the truth about what it was given --------------------------------------------------------------

def test_no_cpu_tier_warning_without_a_cpu_tier():
    plan = minimax_plan(cpu_tier_bytes=None, host_ram_bytes=16 * GiB)  # RAM below the headroom
    assert not any("CPU tier" in w for w in plan.warnings), plan.warnings
    assert any("CPU tier" in w for w in minimax_plan(host_ram_bytes=16 * GiB).warnings)


def test_remote_tiers_are_remote_capacity_not_a_missing_disk_tier():
    from stackctl.plan import REGIME_REMOTE_TIER

    for kind in ("s3", "fs"):
        plan = minimax_plan(disk_tier_bytes=None, remote_tiers=[kind])
        assert plan.regime == REGIME_REMOTE_TIER and plan.remote_tiers == [kind]
        assert f"the rest lives in the {kind} tier" in plan.recommendation
        assert "add or raise a disk tier" not in plan.recommendation
        assert f"remote tier ({kind})" in format_text(plan)
    # without one, the advice is still to add local capacity
    assert "disk tier" in minimax_plan(disk_tier_bytes=None).recommendation


def test_unknown_gpu_hint_names_a_real_flag_and_key():
    plan = minimax_plan(gpu_vram_bytes=None)
    assert "--gpu" in plan.recommendation and "versions.gpu_arch" in plan.recommendation
    assert "in the recipe" not in plan.recommendation
    assert "--gpu" not in minimax_plan(weights_bytes=None).recommendation


def test_plan_cli_host_ram_and_context_limit(tmp_path):
    from helpers import RECIPES, run_cli

    recipe = tmp_path / "r.toml"
    recipe.write_text((RECIPES / "atom-lmcache-cpu.toml").read_text().replace(
        "[model]\n", "[model]\nmax_model_len = 65536\n", 1))
    given = run_cli("plan", str(recipe), "--gpu", "MI300X", "--host-ram", "1024", "--format", "json")
    assert given.returncode == 0, given.stderr
    data = json.loads(given.stdout)
    assert data["host_ram_bytes"] == 1024 * GiB and "host RAM 1,024.0 GiB from --host-ram" in data["notes"]
    assert any("--context 100,000 exceeds model.max_model_len 65,536" in w for w in data["warnings"])
    local = json.loads(run_cli("plan", str(recipe), "--gpu", "MI300X", "--context", "60000", "--format",
                               "json").stdout)
    assert any("this machine's; plan for the serving host with --host-ram" in n for n in local["notes"])
    assert not any("max_model_len" in w for w in local["warnings"])
    bad = run_cli("plan", str(recipe), "--host-ram", "-5")
    assert bad.returncode == 1 and "--host-ram" in bad.stderr  # click's usage error: a user error


def test_the_ram_rows_say_whose_ram_and_what_the_cpu_tier_may_use():
    """At a glance: the RAM measured here is this machine's, the headroom comes off it, and what is left (nothing,
    when the headroom is more than the RAM) is what a CPU tier may use."""
    small = minimax_plan(host_ram_bytes=16 * GiB)
    small.host_ram_source = "this machine"
    rows = [line.strip() for line in format_text(small).splitlines()]
    at = next(i for i, row in enumerate(rows) if row.startswith("host RAM"))
    assert rows[at].startswith("host RAM (this machine's, not --host-ram)")
    assert rows[at + 1].startswith("- headroom kept free, max(10%, 32 GiB)") and "34,359,738,368" in rows[at + 1]
    assert rows[at + 2].startswith("= RAM a CPU tier may use") and rows[at + 2].endswith(" 0 (headroom > RAM)")
    big = minimax_plan(host_ram_bytes=512 * GiB)
    big.host_ram_source = "--host-ram"
    rows = [line.strip() for line in format_text(big).splitlines()]
    assert any(row.startswith("host RAM (--host-ram)") for row in rows)
    assert any(row.startswith("= RAM a CPU tier may use") and "494,780,232,500" in row for row in rows)


def test_a_cpu_stack_served_in_float32_needs_twice_the_kv_bytes_of_bf16():
    """bench --sweep sizes its arms' KV cache with the dtype they compute in: up's decision on a CPU without native
    bf16 is float32, whose KV takes 4 bytes an element (the arms' servers refused to start with bf16's sizing)."""
    from helpers import RECIPES

    from stackctl.plan import plan_recipe
    from stackctl.recipe import load_recipe

    recipe = load_recipe(RECIPES / "cpu-lmcache.toml")  # model.dtype "auto": the model's bfloat16 unless told
    as_written = plan_recipe(recipe, users=1, context_tokens=768).bytes_per_token_all_gpus
    in_float32 = plan_recipe(recipe, users=1, context_tokens=768, serve_dtype="float32").bytes_per_token_all_gpus
    assert as_written == 24_576 and in_float32 == 2 * as_written  # 12 layers x 2 x 8 KV heads x 64 x 2 or 4 bytes


@pytest.mark.parametrize(("features", "served", "per_token"), [
    (("avx2", "avx512f"), "float32", 49_152),  # an AMD EPYC without AVX512-BF16: up serves float32
    (("avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16"), "bfloat16", 24_576),
])
def test_plan_sizes_a_cpu_stacks_kv_for_the_dtype_up_picks_on_this_host(features, served, per_token):
    """model.dtype "auto" on a CPU stack is up's decision per host: plan sizes the KV cache for the same dtype, by the
    same CPU flags, and says which it took (it sized bf16 where up would serve float32, half the bytes)."""
    import dataclasses

    from helpers import RECIPES

    from stackctl.host import discover
    from stackctl.host.isa import CpuIsa
    from stackctl.plan import format_text, plan_recipe
    from stackctl.recipe import load_recipe
    from stackctl.recipe.loader import load_recipe_text

    host = dataclasses.replace(discover(), isa=CpuIsa("x86_64", features))
    recipe = load_recipe(RECIPES / "cpu-lmcache.toml")
    plan = plan_recipe(recipe, users=1, context_tokens=768, host=host)
    assert plan.bytes_per_token_all_gpus == per_token and plan.model_dtype == served
    assert any(note.startswith(f"dtype {served} (") and "what `up` picks on this machine" in note
               for note in plan.notes)
    assert f"KV dtype auto = {served}" in format_text(plan)
    # A dtype the recipe names stands, whatever the CPU.
    text = Path(recipe.source).read_text()
    assert text.count('dtype = "auto"') == 1
    pinned = load_recipe_text(text.replace('dtype = "auto"', 'dtype = "bfloat16"'), recipe.source)
    assert plan_recipe(pinned, users=1, context_tokens=768, host=host).bytes_per_token_all_gpus == 24_576
