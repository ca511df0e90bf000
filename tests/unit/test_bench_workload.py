"""bench's bookkeeping during a run, against a local server in vLLM's shapes (tests/openai_stub.py) whose counters
grow with each completion: the request budget is kept, the hit rate comes from the server's counters, and a server
that dies mid-run marks the results partial with the first error kept. Against live vLLM stacks: tests/integration."""

from __future__ import annotations

import pytest
from openai_stub import Server

from stackctl.bench import probe, workload


def test_probe_asks_each_prompt_per_arm_and_reads_each_arms_hit_rate_from_the_server():
    with Server(hit_share=0.75, caches=True, lmcache=True) as server:
        result = probe.probe(server.url, "tiny", tokens=100, runs=3, lmcache=True)
    assert result["prompt_tokens"] == 100 and result["runs"] == 3 and result["cache_arm"] == "lmcache"
    rates = {arm: values["hit_rate"] for arm, values in result["arms"].items()}
    assert rates == {"recompute": 0.0, "hbm": 0.75, "lmcache": 0.75}
    recomputed = {arm: values["tokens_recomputed"] for arm, values in result["arms"].items()}
    assert recomputed == {"recompute": 100, "hbm": 25, "lmcache": 25}  # prompt tokens minus the server's hits
    assert result["arms"]["hbm"]["tokens_recomputed_runs"] == [25, 25, 25]
    assert all(len(values["ttft_s"]) == 3 for values in result["arms"].values())
    assert result["speedup"] == pytest.approx(result["cold_ttft_s"] / result["warm_ttft_s"])
    warm_up, *requests = [body for path, body in server.received if path == "/v1/completions"]
    assert len(requests) == 9 and warm_up["cache_salt"] == "bench-warm-up"
    first, again, other = requests[:3]  # one prompt: recompute, HBM (same salt), LMCache (another salt)
    assert first["prompt"] == again["prompt"] == other["prompt"] and len(first["prompt"].split()) == 100
    assert first["cache_salt"] == again["cache_salt"] != other["cache_salt"]
    assert requests[3]["prompt"] != first["prompt"]


def test_probe_offload_arm_empties_hbm_and_asks_under_the_same_salt():
    """An offload engine keyed by the salt (LMCache's own server): its arm follows POST /reset_prefix_cache and must
    be an external hit, not an HBM one."""
    with Server(hit_share=0.75, caches=True, offload=True) as server:
        result = probe.probe(server.url, "tiny", tokens=100, runs=2, offload=True)
    assert result["cache_arm"] == "offload" and result["arms"]["offload"]["hit_rate"] == 0.75
    assert "lmcache" not in result["arms"] and "offload engine (HBM emptied)" in probe.probe_table(result)
    paths = [path for path, _ in server.received]
    completions = [body for path, body in server.received if path == "/v1/completions"][1:]
    assert paths.count("/reset_prefix_cache") == 2
    assert completions[0]["cache_salt"] == completions[1]["cache_salt"] == completions[2]["cache_salt"]


def test_probe_without_lmcache_has_no_lmcache_arm_and_the_table_says_so():
    with Server(hit_share=0.5, caches=True) as server:
        result = probe.probe(server.url, "tiny", tokens=50, runs=2)
    assert set(result["arms"]) == {"recompute", "hbm"} and result["hit_rate"] == 0.5
    table = probe.probe_table(result)
    assert "| vLLM prefix cache (HBM) |" in table and "LMCache" not in table and "median of 2" in table


def test_tokens_recomputed_is_the_prompt_minus_every_hit_the_server_counted():
    assert probe.tokens_recomputed(2000, 1792.0) == 208  # LMCache, chunk_size 256: the last 208 tokens
    assert probe.tokens_recomputed(2000, 1920.0) == 80  # vLLM's prefix cache, 128-token blocks
    assert probe.tokens_recomputed(2000, 0.0) == 2000
    assert probe.tokens_recomputed(10, 12.0) == 0  # counters read around a request never make it negative
    assert probe.tokens_recomputed(None, 5.0) is None  # no usage in the answer: unknown, not 0


def test_the_probe_table_has_a_tokens_recomputed_column_per_arm():
    def arm(ttft, over, rate, computed):
        return {"ttft_median_s": ttft, "over_recompute": over, "hit_rate": rate, "tokens_recomputed": computed}

    result = {"prompt_tokens": 2000, "runs": 5, "arms": {
        "recompute": arm(4.0, 1.0, 0.0, 2000), "hbm": arm(0.5, 0.125, 0.96, 80), "lmcache": arm(1.0, 0.25, 0.896, 208)}}
    header, rule, *rows = probe.probe_table(result).splitlines()
    assert header.endswith("| hit rate (server) | tokens recomputed |") and rule == "|---|---|---|---|---|"
    assert rows == ["| recompute (nothing cached) | 4000 | 1.00 | 0.0% | 2000 |",
                    "| vLLM prefix cache (HBM) | 500 | 0.12 | 96.0% | 80 |",
                    "| LMCache (its tiers) | 1000 | 0.25 | 89.6% | 208 |"]
    del result["arms"]["lmcache"]["tokens_recomputed"]  # a probe.json written before the column existed
    result["arms"]["hbm"]["tokens_recomputed"] = None
    assert probe.probe_table(result).splitlines()[-2:] == ["| vLLM prefix cache (HBM) | 500 | 0.12 | 96.0% | - |",
                                                           "| LMCache (its tiers) | 1000 | 0.25 | 89.6% | - |"]


def test_a_workload_stops_at_its_request_budget():
    sessions = workload.agentic_sessions(users=3, turns=4, system_tokens=20, turn_tokens=5, output_tokens=2)
    with Server(hit_share=0.5) as server:
        result = workload.run_workload(server.url, "tiny", sessions, "arm", max_requests=7, max_seconds=60)
    assert len(result.requests) == 7 == server.completions and result.errors == 0
    assert result.hit_rate == 0.5 and result.server_lost is False
    assert {r["completion_tokens"] for r in result.requests} == {2}


def test_a_server_that_dies_mid_run_leaves_partial_results():
    sessions = workload.agentic_sessions(users=1, turns=6, system_tokens=20, turn_tokens=5, output_tokens=2)
    with Server(answer_completions=2) as server:
        result = workload.run_workload(server.url, "tiny", sessions, "arm", max_requests=10, max_seconds=60)
    assert len(result.requests) == 2 and result.errors == 4
    assert result.server_lost is True and result.hit_rate is None
    assert result.first_error.startswith("HTTPError: HTTP Error 500")
    assert result.summary()["partial"] is True
