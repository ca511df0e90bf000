"""A cache hit's TTFT in its parts (stackctl/knowledge/hit_time.py) and bench's line per arm
(stackctl/bench/setups.py arm_figures): the cold arm against the peak, the hit arms never as GFLOP/s."""

from __future__ import annotations

import pytest

from stackctl.bench.setups import arm_figures
from stackctl.host.matmul import MatmulPeak
from stackctl.host.prefill import Floor
from stackctl.knowledge.hit_time import breakdown_text, hit_breakdown, kv_bytes_per_token
from stackctl.knowledge.model_flops import prefill_cost

# the cpu-lmcache stack's ~150M random Llama
MODEL = prefill_cost({"hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 12,
                      "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 64, "vocab_size": 4096})


def test_kv_bytes_per_token_are_k_and_v_of_every_layer_in_the_served_dtype():
    assert kv_bytes_per_token(MODEL, "bfloat16") == 2 * 12 * 8 * 64 * 2 == 24_576
    assert kv_bytes_per_token(MODEL, "float32") == 49_152
    assert kv_bytes_per_token(MODEL, None) is None


def test_an_lmcache_hit_is_its_load_as_logged_its_recomputed_tokens_at_the_cold_rate_and_the_rest():
    load = (1920 * 24_576, 20.0)  # bytes and ms, as LMCache logged the request's retrieve
    parts = hit_breakdown(MODEL, 2000, 1920, 0.100, recompute_gflops=500.0, kv_bytes_token=24_576, moved=True,
                          load=load, memcpy_gb_s=5.0)
    assert parts["prefill_s"] == pytest.approx(MODEL.flops(1920, 2000) / 500e9)
    assert parts["load_s"] == 0.020 and parts["load_gb_s"] == pytest.approx(1920 * 24_576 / 0.020 / 1e9)
    assert parts["load_over_memcpy"] == pytest.approx(parts["load_gb_s"] / 5.0)
    assert parts["rest_s"] == pytest.approx(0.100 - 0.020 - parts["prefill_s"])
    text = breakdown_text(parts)
    assert text.startswith("1,920 cached tokens loaded: 47.2 MB in 20 ms (2.36 GB/s = 0.47x this host's memcpy)")
    assert "80 tokens recomputed ~ " in text and "the rest " in text and "GFLOP/s" not in text


def test_a_prefix_cache_hit_moves_nothing_and_an_unreported_load_stays_in_the_rest():
    hbm = hit_breakdown(MODEL, 2000, 1920, 0.060, recompute_gflops=500.0, kv_bytes_token=24_576, moved=False)
    assert hbm["kv_bytes"] == 0 and hbm["load_s"] == 0.0
    assert breakdown_text(hbm).startswith("1,920 cached tokens in place in vLLM's prefix cache (nothing moved)")
    offload = hit_breakdown(MODEL, 2000, 1920, 0.060, recompute_gflops=500.0, kv_bytes_token=24_576, moved=True)
    assert offload["load_s"] is None and offload["kv_bytes"] == 1920 * 24_576
    assert "(47.2 MB; the engine does not report how long: inside the rest)" in breakdown_text(offload)
    unknown = hit_breakdown(MODEL, 2000, 1920, 0.060, recompute_gflops=None, kv_bytes_token=None, moved=True)
    assert unknown["rest_s"] is None and "time unknown: no recompute rate" in breakdown_text(unknown)
    over = hit_breakdown(MODEL, 2000, 1000, 0.001, recompute_gflops=500.0, kv_bytes_token=24_576, moved=False)
    assert over["rest_s"] < 0 and "more than the TTFT" in breakdown_text(over)


def _probe(cold_s: float, hit_s: float) -> dict:
    arm = {"hit_rate": 0.96, "tokens_recomputed": 80, "ttft_median_s": hit_s}
    return {"prompt_tokens": 2000, "arms": {
        "recompute": {"hit_rate": 0.0, "tokens_recomputed": 2000, "ttft_median_s": cold_s},
        "hbm": dict(arm), "lmcache": dict(arm, loads=[[47_185_920, 30.0], [47_185_920, 20.0], [47_185_920, 25.0]])}}


def test_bench_prints_the_cold_arm_against_the_peak_and_each_hit_arm_in_its_parts():
    floor = Floor(MODEL, "bfloat16", MatmulPeak({"bfloat16": 1000.0, "float32": 300.0}, 2, memcpy_gb_s=6.0))
    result = _probe(cold_s=MODEL.flops(0, 2000) / 400e9, hit_s=0.090)
    lines = {}
    for arm, values in result["arms"].items():
        values.update(arm_figures(floor, arm, values, result))
        lines[arm] = values["prefill_text"]
    assert lines["recompute"].endswith("400.0 GFLOP/s = 40% of this host's bfloat16 matmul peak")
    assert lines["hbm"].startswith("1,920 cached tokens in place") and "GFLOP/s" not in lines["hbm"]
    assert lines["lmcache"].startswith("1,920 cached tokens loaded: 47.2 MB in 25 ms (1.89 GB/s = 0.31x")
    # the recomputed tokens at the cold arm's 400 GFLOP/s
    assert result["arms"]["lmcache"]["breakdown"]["prefill_s"] == pytest.approx(MODEL.flops(1920, 2000) / 400e9)


def test_bench_reports_a_cold_rate_above_the_peak_as_a_failed_measurement_and_estimates_nothing_from_it():
    floor = Floor(MODEL, "bfloat16", MatmulPeak({"bfloat16": 400.1}, 2))
    result = _probe(cold_s=MODEL.flops(0, 2000) / 478.7e9, hit_s=0.090)
    cold = result["arms"]["recompute"]
    cold.update(arm_figures(floor, "recompute", cold, result))
    assert "measurement failed: 478.7 GFLOP/s is above this host's matmul peak" in cold["prefill_text"]
    assert "%" not in cold["prefill_text"]
    hit = result["arms"]["hbm"]
    hit.update(arm_figures(floor, "hbm", hit, result))
    assert hit["breakdown"]["prefill_s"] is None and "no recompute rate" in hit["prefill_text"]


def test_doctor_measures_the_peak_again_when_a_cold_rate_is_above_the_kept_one(monkeypatch):
    """up's probe, run while another stack started, kept 80.7 GFLOP/s; doctor's cold prefill then ran at 103.8 and
    was reported as a failed measurement. Doctor measures again (the best of both is kept) before it says so."""
    from stackctl.doctor import dtype_checks

    cost = MODEL
    seconds = cost.flops(0, 129) / 103.8e9
    low, quiet = MatmulPeak({"bfloat16": 80.7}, 2), MatmulPeak({"bfloat16": 166.0}, 2)
    asked = []

    def peak(ctx, fresh=False):
        asked.append(fresh)
        return (quiet, "") if fresh else (low, "")

    monkeypatch.setattr(dtype_checks, "prefill_floor", lambda ctx: Floor(cost, "bfloat16", low))
    monkeypatch.setattr(dtype_checks, "matmul_peak", peak)
    text = dtype_checks.cold_rate_text(object(), 129, 0, seconds)
    assert asked == [True] and text.endswith("103.8 GFLOP/s = 63% of this host's bfloat16 matmul peak)"), text
    monkeypatch.setattr(dtype_checks, "matmul_peak", lambda ctx, fresh=False: (low, ""))
    assert "measurement failed: 103.8 GFLOP/s is above" in dtype_checks.cold_rate_text(object(), 129, 0, seconds)
